"""QueuedKubeSpawner's pod manifests built on one spawner object, without a hub: profile
overrides that must not leak from one spawn into the next, and the affinity placement mode.
Emulated: the Kubernetes API (kmock; only the client's configuration and serialisation are
used) and the admitted workloads. Every manifest is validated with kubernetes-validate
--strict against the pinned Kubernetes version."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from kubernetes_validate.utils import validate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kmock_cluster import KmockCluster  # noqa: E402
from kube_profiles import K8S_VERSION, NS, PROFILES, notebook  # noqa: E402


def test_profile_switch_on_one_spawner_object_leaks_nothing(tmp_path, monkeypatch):
    """KubeSpawner merges a profile's dict overrides into the spawner object. JupyterHub 6 makes a
    new spawner object after a clean stop, but a hub that reuses one (older hubs, restarts on the
    same object) would carry the A100 profile's GPU limit, selector and tolerations into a CPU
    spawn. The same object here: A100, then CPU. Emulated: the Kubernetes API (kmock; only the
    client's configuration and serialisation are used) and the admitted workloads."""
    from traitlets.config import Config

    from spawner.kube import QueuedKubeSpawner

    with KmockCluster(tmp_path) as cluster:
        import kubernetes_asyncio.config.kube_config as kc     # reads $KUBECONFIG at import time
        monkeypatch.setattr(kc, "KUBE_CONFIG_DEFAULT_LOCATION",
                            str(cluster.write_kubeconfig(tmp_path / "kubeconfig", NS)))
        c = Config()
        c.KubeSpawner.profile_list = PROFILES
        c.KubeSpawner.namespace = NS

        async def spawn_twice():
            sp = QueuedKubeSpawner(_mock=True, config=c)
            sp.workload_id = "w0000001"
            sp.user_options = {"profile": "a100", "image": "tf"}
            await sp.load_user_options()
            assert sp.workload_spec()["resources"]["gpu"] == 1 and sp.workload_spec()["gpu_model"] == "a100"
            sp._admitted_w = {"placement": [{"node": "kube-gpu-1", "gpus": [0]}], "priority": "interactive",
                              "queue": "vision"}
            gpu_pod = sp._serialize(await sp.get_pod_manifest())
            sp.user_options = {"profile": "cpu"}
            await sp.load_user_options()
            spec = sp.workload_spec()
            sp._admitted_w = {"placement": [{"node": "kube-gpu-1", "gpus": []}], "priority": "interactive",
                              "queue": "vision"}
            cpu_pod = sp._serialize(await sp.get_pod_manifest())
            return sp, gpu_pod, spec, cpu_pod

        sp, gpu_pod, spec, cpu_pod = asyncio.run(spawn_twice())
    assert notebook(gpu_pod)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert gpu_pod["spec"]["tolerations"] and gpu_pod["spec"]["nodeSelector"]
    assert spec["resources"].get("gpu", 0) == 0 and "gpu_model" not in spec, spec
    assert sp.extra_resource_limits == {} and sp.node_selector == {} and sp.tolerations == [], \
        (sp.extra_resource_limits, sp.node_selector, sp.tolerations)
    assert "nvidia.com/gpu" not in notebook(cpu_pod)["resources"].get("limits", {})
    assert not cpu_pod["spec"].get("nodeSelector") and not cpu_pod["spec"].get("tolerations"), cpu_pod["spec"]
    assert notebook(cpu_pod)["image"] == "quay.io/jupyter/base-notebook:2025-01-06" or \
        notebook(cpu_pod)["image"] == sp.image
    for pod in (gpu_pod, cpu_pod):
        validate(pod, K8S_VERSION, strict=True)


def test_affinity_placement_mode_and_priority_class_map(tmp_path, monkeypatch):
    """placement_mode = "affinity": the admitted node becomes a required node affinity term
    (ANDed into the admin's own terms) instead of nodeName; priority_class_names overrides the
    template. Emulated: the Kubernetes API (kmock; only the client's configuration is used)."""
    from traitlets.config import Config

    from spawner.kube import QueuedKubeSpawner

    with KmockCluster(tmp_path) as cluster:
        import kubernetes_asyncio.config.kube_config as kc
        monkeypatch.setattr(kc, "KUBE_CONFIG_DEFAULT_LOCATION",
                            str(cluster.write_kubeconfig(tmp_path / "kubeconfig", NS)))
        c = Config()
        c.KubeSpawner.profile_list = PROFILES
        c.QueuedKubeSpawner.placement_mode = "affinity"
        c.QueuedKubeSpawner.priority_class_names = {"interactive": "notebooks-high"}
        c.KubeSpawner.node_affinity_required = [{"matchExpressions": [
            {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}]}]

        async def manifest():
            sp = QueuedKubeSpawner(_mock=True, config=c)
            sp.workload_id, sp.user_options = "w0000002", {"profile": "a100"}
            await sp.load_user_options()
            sp._admitted_w = {"placement": [{"node": "kube-gpu-1", "gpus": [2]}], "priority": "interactive",
                              "queue": "vision"}
            return sp._serialize(await sp.get_pod_manifest())

        pod = asyncio.run(manifest())
    assert "nodeName" not in pod["spec"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]},
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["kube-gpu-1"]}]}]
    assert pod["spec"]["priorityClassName"] == "notebooks-high"
    assert notebook(pod)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    validate(pod, K8S_VERSION, strict=True)


IPTABLES = {"name": "block-cloud-metadata", "image": "quay.io/jupyterhub/k8s-network-tools:4.1.0",
            "command": ["iptables", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "DROP"],
            "securityContext": {"privileged": True, "runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}}}


@pytest.fixture
def kube_api(tmp_path, monkeypatch):
    """The emulated Kubernetes API, as the spawner's client reads it (only its configuration and
    serialisation are used)."""
    with KmockCluster(tmp_path) as cluster:
        import kubernetes_asyncio.config.kube_config as kc
        monkeypatch.setattr(kc, "KUBE_CONFIG_DEFAULT_LOCATION",
                            str(cluster.write_kubeconfig(tmp_path / "kubeconfig", NS)))
        yield cluster


def guarded_manifest(profile: str, profiles=PROFILES, **traits) -> dict | str:
    """QueuedKubeSpawner's pod for ``profile`` with these QueuedKubeSpawner traits, admitted onto
    kube-gpu-1; or the refusal a user would see (the 400's message)."""
    from tornado.web import HTTPError
    from traitlets.config import Config

    from spawner.kube import QueuedKubeSpawner

    async def manifest():
        c = Config()
        c.KubeSpawner.profile_list = list(profiles)
        for k, v in traits.items():
            setattr(c.QueuedKubeSpawner, k, v)
        sp = QueuedKubeSpawner(_mock=True, config=c)
        sp.workload_id, sp.user_options = "w0000003", {"profile": profile}
        await sp.load_user_options()
        sp._admitted_w = {"placement": [{"node": "kube-gpu-1", "gpus": []}], "priority": "interactive",
                          "queue": "vision"}
        try:
            return sp._serialize(await sp.get_pod_manifest())
        except HTTPError as e:
            return e.jupyterhub_message
    return asyncio.run(manifest())


def test_pod_guard_on_the_spawners_own_manifest(kube_api):
    """The pod guard on what QueuedKubeSpawner really builds: z2jh's iptables init container
    (privileged, NET_ADMIN), which the admin's own init_containers carry, passes; a profile
    whose container adds SYS_ADMIN is refused with a 400 naming it, unless the admin waived
    "capabilities". Emulated: the Kubernetes API (kmock) and the admitted workload."""
    tracer = {"display_name": "Tracing", "slug": "trace", "kubespawner_override": {
        "container_security_context": {"capabilities": {"add": ["SYS_ADMIN"]}, "allowPrivilegeEscalation": False}}}
    profiles = [*PROFILES, tracer]
    cpu = guarded_manifest("cpu", profiles, init_containers=[IPTABLES])
    refused = guarded_manifest("trace", profiles, init_containers=[IPTABLES])
    waived = guarded_manifest("trace", profiles, init_containers=[IPTABLES], pod_policy_waive=["capabilities"])
    assert cpu["spec"]["initContainers"][0]["name"] == "block-cloud-metadata"
    validate(cpu, K8S_VERSION, strict=True)
    assert refused == ("refused: container 'notebook' would add the capabilities SYS_ADMIN; "
                       "no admin allowed it"), refused
    assert notebook(waived)["securityContext"]["capabilities"] == {"add": ["SYS_ADMIN"]}


def test_restricted_notebook_pods(kube_api):
    """pod_security = "restricted": KubeSpawner's default notebook pod is brought to the restricted
    level (what a namespace enforcing it admits) and validates; a configuration that still falls
    short is refused with the reason, an admin's own privileged init container included.
    Emulated: the Kubernetes API (kmock) and the admitted workload."""
    from spawner.pod_guard import restricted_violations
    pod = guarded_manifest("cpu", pod_security="restricted")
    root = guarded_manifest("cpu", pod_security="restricted", uid=0)
    iptables = guarded_manifest("cpu", pod_security="restricted", init_containers=[IPTABLES])
    assert restricted_violations(pod) == [], restricted_violations(pod)
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert notebook(pod)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    validate(pod, K8S_VERSION, strict=True)
    assert root.startswith("refused: container 'notebook' may run as root"), root
    assert "restricted level forbids (QueuedKubeSpawner.pod_security)" in root
    assert iptables.startswith("refused: ") and "'block-cloud-metadata'" in iptables, iptables
    assert IPTABLES["securityContext"] == {"privileged": True, "runAsUser": 0,          # the config untouched
                                           "capabilities": {"add": ["NET_ADMIN"]}}
