"""The Kubernetes launcher's backend alone, without a hub: which notebook pod a job copies
(image, home volume, security context) and what a restarted launcher adopts.

Real: KubeLauncher and QueuedKubeSpawner's own pod manifests (a spawner object without a hub,
its admission given), kubernetes_asyncio talking HTTP through a kubeconfig. Emulated: the
Kubernetes API (kmock, tests/spawner/kmock_cluster.py, which honours label selectors); the
notebook pods are created in it as the spawner would create them, and nothing runs.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kmock_cluster import KmockCluster  # noqa: E402
from kube_controllers import bare_job, create  # noqa: E402
from kube_profiles import NS, PROFILES  # noqa: E402

from spawner.kube import label_value  # noqa: E402
from spawner.launch_kube import KubeLauncher  # noqa: E402

LABEL_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")   # Kubernetes' label value grammar
ODD_NAMES = ["alice", "alice_", "alice.", "alice@corp.com", "alice-corp.com", "Alice",
             "a" * 63 + "x" * 17, "a" * 63 + "y" * 17, "_", "ünïcode", "x--y", "alice\n"]
DEFAULT_IMAGE = KubeLauncher.default_image.default_value


def test_user_label_values_are_valid_and_never_shared():
    """The old values collided (alice, alice_ and alice. were all 'alice'), and the launcher
    finds a user's notebook pod by this label."""
    values = [label_value(u) for u in ODD_NAMES]
    assert len(set(values)) == len(ODD_NAMES), dict(zip(ODD_NAMES, values))
    for v in values:
        assert LABEL_RE.fullmatch(v) and 0 < len(v) <= 63, v
    assert values[:5:4] == ["alice", "alice-corp.com"]          # valid names are kept, readable
    assert values[1].startswith("alice--") and values[3].startswith("alice-corp.com--")
    assert values[6].startswith("a" * 51 + "--") and len(values[6]) == 63
    # A user named like another's hashed value does not get that value.
    for v in values:
        assert "--" not in v or label_value(v) != v
    assert label_value("") == ""            # an empty queue: no label


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    with KmockCluster(tmp_path) as c:
        c.kubeconfig = str(c.write_kubeconfig(tmp_path / "kubeconfig", NS))
        import kubernetes_asyncio.config.kube_config as kc     # QueuedKubeSpawner's client reads it
        monkeypatch.setattr(kc, "KUBE_CONFIG_DEFAULT_LOCATION", c.kubeconfig)
        yield c
        c.check()


def spawner_pod(user: str, image: str) -> dict:
    """The pod QueuedKubeSpawner makes for ``user``'s notebook, with a home claim of their own."""
    from traitlets.config import Config

    from spawner.kube import QueuedKubeSpawner

    c = Config()
    c.KubeSpawner.profile_list = PROFILES
    c.KubeSpawner.namespace = NS
    c.KubeSpawner.image = image
    c.KubeSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}]
    c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]

    async def manifest():
        sp = QueuedKubeSpawner(_mock=True, config=c, user=SimpleNamespace(name=user, id=1, url="/user/"))
        sp.workload_id, sp.user_options = "w0000001", {"profile": "cpu"}
        await sp.load_user_options()
        sp._admitted_w = {"placement": [{"node": "kube-gpu-1", "gpus": []}], "priority": "interactive",
                          "queue": "vision"}
        return sp._serialize(await sp.get_pod_manifest())

    return asyncio.run(manifest())


def job_pod(cluster, tmp_path, user: str, wid: str, **settings) -> dict:
    """The pod spec of the Job the launcher (with ``settings``) starts for a training job of ``user``."""
    w = {"id": wid, "user": user, "queue": "vision", "kind": "training", "priority": "training", "workers": 1,
         "resources": {"gpu": 1}, "placement": [{"node": "kube-gpu-1", "gpus": [0]}],
         "metadata": {"job": {"command": ["python", "train.py"]}}, "admitted_at": 1000.0}

    async def start():
        backend = KubeLauncher(namespace=NS, kubeconfig=cluster.kubeconfig, logs_dir=str(tmp_path), **settings)
        try:
            await backend.start(w)
        finally:
            await backend.close()

    asyncio.run(start())
    [job] = [j for j in cluster.created("jobs") if j["metadata"]["name"] == f"ch-{wid}"]
    assert job["metadata"]["annotations"]["computehub/user"] == user
    return job["spec"]["template"]["spec"]


def copied(spec: dict) -> tuple[str, list]:
    return spec["containers"][0]["image"], spec.get("volumes", [])


def test_a_job_copies_its_owners_notebook_pod_and_nobody_elses(cluster, tmp_path):
    pods = {u: spawner_pod(u, f"registry.example/{i}:v1") for i, u in enumerate(["alice", "alice-corp.com"])}
    for u, pod in pods.items():
        assert pod["metadata"]["labels"]["computehub/user"] == u
        assert pod["metadata"]["annotations"]["computehub/user"] == u
        cluster.run(create(cluster, f"/api/v1/namespaces/{NS}/pods", pod))
    assert spawner_pod("alice_", "x")["metadata"]["labels"]["computehub/user"] != "alice"

    image, volumes = copied(job_pod(cluster, tmp_path, "alice", "w0000011"))
    assert image == "registry.example/0:v1"
    assert volumes == pods["alice"]["spec"]["volumes"] and volumes[0]["persistentVolumeClaim"]["claimName"]
    # Users whose names the old label value mapped onto theirs get the default, no one's home.
    for i, user in enumerate(["alice_", "alice.", "alice@corp.com"]):
        assert copied(job_pod(cluster, tmp_path, user, f"w000002{i}")) == (DEFAULT_IMAGE, []), user


def test_restricted_jobs_of_a_kubespawner_notebook_meet_the_restricted_level(cluster, tmp_path):
    """KubeSpawner's own notebook pod (runAsUser 1000, no escalation, nothing else said) copied by
    a launcher with pod_security = "restricted": the Job's pod meets the restricted level, as a
    namespace enforcing it would check, and is a valid Job for the pinned Kubernetes."""
    from kube_profiles import K8S_VERSION
    from kubernetes_validate.utils import validate

    from spawner.pod_guard import restricted_violations
    cluster.run(create(cluster, f"/api/v1/namespaces/{NS}/pods", spawner_pod("alice", "registry.example/nb:v1")))
    spec = job_pod(cluster, tmp_path, "alice", "w0000031", pod_security="restricted")
    assert restricted_violations({"spec": spec}) == []
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    [job] = [j for j in cluster.created("jobs") if j["metadata"]["name"] == "ch-w0000031"]
    validate(job, K8S_VERSION, strict=True)
    # The default level copies the notebook as it is, which the restricted level would refuse.
    assert restricted_violations({"spec": job_pod(cluster, tmp_path, "alice", "w0000032")})


def test_a_pod_whose_annotations_do_not_name_the_owner_is_never_copied(cluster, tmp_path):
    """Pods the selector finds for alice (the label alone says so), but that are not hers: one
    labelled by an earlier, lossy label value for "alice_"; one with no owner annotation; one
    whose two owner annotations disagree. Then one with only KubeSpawner's own annotation (a
    notebook started before ComputeHub annotated them) that does name her is copied."""
    labels = {"component": "singleuser-server", "computehub/user": "alice"}
    spec = {"containers": [{"name": "notebook", "image": "registry.example/not-hers:v1",
                            "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}]}],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-not-hers"}}]}
    for name, annotations in [("old-alice-", {"hub.jupyter.org/username": "alice_"}),
                              ("bare", {}),
                              ("disagree", {"computehub/user": "alice", "hub.jupyter.org/username": "mallory"})]:
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
               "metadata": {"name": name, "labels": labels, "annotations": annotations}}
        cluster.run(create(cluster, f"/api/v1/namespaces/{NS}/pods", pod))
    assert copied(job_pod(cluster, tmp_path, "alice", "w0000031")) == (DEFAULT_IMAGE, [])

    hers = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "jupyter-alice", "labels": labels, "annotations": {"hub.jupyter.org/username": "alice"}},
        "spec": {**spec, "containers": [{**spec["containers"][0], "image": "registry.example/hers:v1"}],
                 "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}}]}}
    cluster.run(create(cluster, f"/api/v1/namespaces/{NS}/pods", hers))
    assert copied(job_pod(cluster, tmp_path, "alice", "w0000032")) == (
        "registry.example/hers:v1", [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}}])


def test_a_restarted_launcher_adopts_what_runs(cluster, tmp_path):
    """As a restarted launcher would use it: a fresh KubeLauncher finds the Job another one
    created, not for a later run of the workload, and no longer after it was stopped."""
    w = {"id": "w9999999", "user": "carol", "queue": "nlp", "kind": "training", "priority": "training",
         "workers": 1, "resources": {"gpu": 1}, "placement": [{"node": "kube-gpu-2", "gpus": [3]}],
         "metadata": {"job": {"command": ["true"]}}, "admitted_at": 1000.0}
    kubeconfig = cluster.kubeconfig

    async def scenario():
        first = KubeLauncher(namespace=NS, kubeconfig=kubeconfig, logs_dir=str(tmp_path))
        notes = await first.start(w)
        await first.close()
        second = KubeLauncher(namespace=NS, kubeconfig=kubeconfig, logs_dir=str(tmp_path))
        adopted, running = await second.adopt(w), await second.poll(w)
        later_run = await second.adopt({**w, "admitted_at": 2000.0})    # requeued, admitted again
        await second.stop(w, 1)
        gone = await second.adopt(w)
        await second.close()
        return notes, adopted, running, later_run, gone

    notes, adopted, running, later_run, gone = asyncio.run(scenario())
    assert notes["node"] == "kube-gpu-2" and "Job ch-w9999999" in notes["message"]
    assert adopted is True and running is None and later_run is False and gone is False
    # A Job made by a launcher from before runs were marked is adopted: an upgrade keeps what runs.
    cluster.run(create(cluster, f"/apis/batch/v1/namespaces/{NS}/jobs", bare_job("ch-w9999999", w["id"])))

    async def legacy():
        backend = KubeLauncher(namespace=NS, kubeconfig=kubeconfig, logs_dir=str(tmp_path))
        try:
            return await backend.adopt(w)
        finally:
            await backend.stop(w, 0)
            await backend.close()

    assert asyncio.run(legacy()) is True
    assert (tmp_path / "w9999999.log").read_text().startswith("[computehub] created Job ch-w9999999")
