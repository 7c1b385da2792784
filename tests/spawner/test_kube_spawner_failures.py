"""A notebook pod that fails after admission (docs/spawner.md, "When the pod fails"): the spawn
fails at once with the cause (not after start_timeout), or, where the cluster is to blame and the
class requeues, waits in the queue again; a running server that dies is reported with the cause;
either way its GPU returns.

Real: JupyterHub + proxy + the ComputeHub service, QueuedKubeSpawner in the hub, kubespawner and
kubernetes_asyncio talking HTTP, and the notebook servers (jupyterhub-singleuser as local
processes). Emulated: the Kubernetes API (kmock, tests/spawner/kmock_cluster.py); the kubelet (the
test's ProcessKubelet runs the pods; for an image in its ``faults`` it writes the status a kubelet
that cannot pull it writes, or never takes the pod, as a node that is gone); the kubelet's and the
node lifecycle controller's later verdicts (OOMKilled, evicted) are written by the test as pod
status; the GPU node ("kube-gpu-1", one A100) is declared, and exists as a Node object that the
test deletes or marks NotReady as the node lifecycle controller and pod garbage collector would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from kube_controllers import create, patch_status  # noqa: E402
from kube_hubs import (hub_api, newest_workload, server, spawn, spawner_hub, stop, user_pods, wait_for,  # noqa: E402
                       wait_ready, workload)
from kube_profiles import NS  # noqa: E402

TORCH = "quay.io/jupyter/pytorch-notebook:2025-01-06"
TF = "quay.io/jupyter/tensorflow-notebook:2025-01-06"
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "kube-gpu-1"}, "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
PULL_FAILED = {"phase": "Pending", "hostIP": "10.0.0.1", "containerStatuses": [{
    "name": "notebook", "ready": False, "restartCount": 0, "image": TF, "imageID": "",
    "state": {"waiting": {"reason": "ErrImagePull",
                          "message": f'failed to pull and unpack image "{TF}": not found'}}}]}


@pytest.fixture(scope="module")
def fhub(tmp_path_factory):
    with spawner_hub(tmp_path_factory.mktemp("khub-failures"), """
c.Spawner.poll_interval = 1
c.KubeSpawner.start_timeout = 40
c.QueuedKubeSpawner.container_start_grace = 0
c.QueuedKubeSpawner.unscheduled_grace = 3
""", setup=lambda cluster: cluster.run(create(cluster, "/api/v1/nodes", NODE))) as hub:
        yield hub


def spawn_failure(hub, user, options) -> str:
    """The message a spawn fails with: the POST's error (it failed within slow_spawn_timeout), or
    the failure at the end of its progress stream."""
    r = hub_api(hub, "POST", f"/users/{user}/server", user, json=options)
    if r.status_code not in (201, 202):
        return r.json()["message"]
    with hub_api(hub, "GET", f"/users/{user}/server/progress", user, stream=True, timeout=120) as s:
        for line in s.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                ev = json.loads(line[5:])
                if ev.get("failed"):
                    return ev["message"]
                if ev.get("ready"):
                    raise AssertionError(f"{user}'s server started: {ev}")
    raise AssertionError("the progress stream ended without a failure")


def events(hub, wid) -> list[dict]:
    return hub.call("GET", f"/audit?workload={wid}", hub.tokens["ada"]).json().get("events", [])


def test_an_image_that_cannot_be_pulled_fails_the_spawn_at_once_and_frees_the_gpu(fhub):
    hub = fhub
    hub.cluster.kubelet.faults[TF] = PULL_FAILED
    message = spawn_failure(hub, "alice", {"profile": "a100", "image": "tf"})
    assert f"the notebook server: image '{TF}' could not be pulled: ErrImagePull: failed to pull" in message, message
    w = newest_workload(hub, "alice")
    w = wait_for("the workload failed", lambda: (x := workload(hub, w["id"]))["state"] == "failed" and x, 30)
    assert w["reason"].startswith(f"the notebook server: image '{TF}' could not be pulled: ErrImagePull"), w
    wait_for("alice's pod deleted", lambda: user_pods(hub, "alice") == [], 30)
    wait_for("alice's failed spawn to settle", lambda: not (server(hub, "alice") or {}).get("pending"), 60)
    spawn(hub, "bob", {"profile": "a100"})          # the only GPU is free again
    wait_ready(hub, "bob")
    stop(hub, "bob")


def test_a_pod_no_node_takes_is_requeued_and_starts_when_it_can(fhub):
    """The cluster's fault (the node it is bound to never starts it): the admission is given back
    as node_lost and, with a class that requeues, the same spawn waits in the queue and starts."""
    hub = fhub
    admin = hub.tokens["ada"]
    cls = hub.call("GET", "/classes/interactive", admin).json()
    r = hub.call("PUT", "/classes/interactive", admin, json={**cls, "requeue": True})
    assert r.status_code == 200, r.text
    try:
        hub.cluster.kubelet.faults[TORCH] = None
        spawn(hub, "alice", {"profile": "a100", "image": "torch"})
        w = wait_for("alice's workload", lambda: newest_workload(hub, "alice"), 30)
        lost = wait_for("node_lost", lambda: [e for e in events(hub, w["id"]) if e["kind"] == "node_lost"], 60)
        assert "the notebook server was not started by node kube-gpu-1 for " in lost[0]["reason"], lost
        assert any(e["kind"] == "requeued" for e in events(hub, w["id"]))
        del hub.cluster.kubelet.faults[TORCH]        # the node is back
        wait_ready(hub, "alice")
        assert newest_workload(hub, "alice")["id"] == w["id"] and workload(hub, w["id"])["state"] == "running"
        stop(hub, "alice")
    finally:
        hub.cluster.kubelet.faults.pop(TORCH, None)
        hub.call("PUT", "/classes/interactive", admin, json=cls)


OOM = {"phase": "Failed", "containerStatuses": [{
    "name": "notebook", "ready": False, "restartCount": 0, "image": TORCH, "imageID": "",
    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
EVICTED = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
           "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}],
           "containerStatuses": [{"name": "notebook", "ready": False, "restartCount": 0, "image": TORCH, "imageID": "",
                                  "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}}}]}


def running_server(hub) -> tuple[dict, str]:
    """alice's notebook server, up: (its workload, its pod's name)."""
    spawn(hub, "alice", {"profile": "a100", "image": "torch"})
    wait_ready(hub, "alice")
    [pod] = user_pods(hub, "alice")
    return newest_workload(hub, "alice"), pod["metadata"]["name"]


@pytest.mark.parametrize("status,reason,kind", [
    (OOM, "the notebook server was OOMKilled (memory limit 2Gi)", "failed"),
    (EVICTED, "the notebook server: evicted from node kube-gpu-1 by its kubelet: The node was low on resource: "
              "memory.", "node_lost"),
    (None, "the notebook server's pod jupyter-alice is gone (deleted outside ComputeHub, or with its node)", "failed"),
], ids=["oomkilled", "evicted", "deleted-by-hand"])
def test_a_running_server_that_dies_is_reported_with_the_cause(fhub, status, reason, kind):
    hub = fhub
    w, name = running_server(hub)
    if status is None:                      # kubectl delete pod
        delete_pod(hub, name)
    else:
        hub.cluster.run(hub.cluster.patch_pod_status(NS, name, status))
    ended = wait_for("the workload failed", lambda: (x := workload(hub, w["id"]))["state"] == "failed" and x, 60)
    assert ended["reason"].startswith(reason.replace("jupyter-alice", name)), ended
    assert any(e["kind"] == kind for e in events(hub, w["id"])), events(hub, w["id"])
    wait_for("alice's server gone", lambda: not server(hub, "alice"), 60)
    spawn(hub, "bob", {"profile": "a100"})          # the GPU is free again
    wait_ready(hub, "bob")
    stop(hub, "bob")


def delete(hub, path: str) -> None:
    async def go():
        async with hub.cluster.emulator.delete(path) as r:
            r.raise_for_status()
    hub.cluster.run(go())


def delete_pod(hub, name):
    delete(hub, f"/api/v1/namespaces/{NS}/pods/{name}")


def node_deleted(hub):
    delete(hub, "/api/v1/nodes/kube-gpu-1")


def node_not_ready(hub):
    hub.cluster.run(patch_status(hub.cluster, "/api/v1/nodes/kube-gpu-1", {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}))


def node_back(hub):
    if any(n["metadata"]["name"] == "kube-gpu-1" for n in hub.cluster.objects("nodes")):
        hub.cluster.run(patch_status(hub.cluster, "/api/v1/nodes/kube-gpu-1", NODE["status"]))
    else:
        hub.cluster.run(create(hub.cluster, "/api/v1/nodes", NODE))


@pytest.mark.parametrize("node_goes,why", [
    (node_deleted, "its node kube-gpu-1 went away (deleted from the cluster)"),
    (node_not_ready, "its node kube-gpu-1 went away (NotReady or unreachable)"),
], ids=["node-deleted", "node-not-ready"])
def test_a_server_whose_pod_went_with_its_node_is_reported_node_lost(fhub, node_goes, why):
    """Its node goes and its pod with it (the pod garbage collector deletes a deleted node's pods;
    the node controller evicts an unreachable node's): the cluster's doing, reported as node_lost
    with the node's name, as for jobs; not as a pod someone deleted."""
    hub = fhub
    w, name = running_server(hub)
    try:
        node_goes(hub)
        delete_pod(hub, name)
        ended = wait_for("the workload failed", lambda: (x := workload(hub, w["id"]))["state"] == "failed" and x, 60)
        assert ended["reason"].startswith(f"the notebook server: {why}; its pod {name} is gone"), ended
        lost = [e for e in events(hub, w["id"]) if e["kind"] == "node_lost"]
        assert lost and lost[0]["reason"] == ended["reason"], events(hub, w["id"])
        wait_for("alice's server gone", lambda: not server(hub, "alice"), 60)
    finally:
        node_back(hub)
    spawn(hub, "bob", {"profile": "a100"})          # the GPU is free again
    wait_ready(hub, "bob")
    stop(hub, "bob")
