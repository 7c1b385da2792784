"""A failing job pod, end to end: the service hears the cause, releases the GPUs, and requeues
what the cluster (not the user) stopped (docs/launcher-kubernetes.md, "When a pod fails").

Real: JupyterHub + proxy + the ComputeHub service, and the launcher driver (the hub's managed
service) with the KubeLauncher backend, talking HTTP to the Kubernetes API. Emulated: the
Kubernetes API (kmock, tests/spawner/kmock_cluster.py), the job controller
(tests/spawner/kube_controllers.py makes each Job's pods) and the kubelet (the test writes the
pod status a kubelet writes: a waiting ErrImagePull, Running; or writes nothing, as a node that
never takes the pod); the node controller and pod garbage collector (the test deletes a pod as
they would) and the inventory (the test tells the service what computehub-inventory tells it of a
NotReady or cordoned Node). Declared GPU node: "kube-gpu-1" with 4 A100.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from kube_controllers import patch_status  # noqa: E402
from kube_hubs import launcher_hub  # noqa: E402
from localhub import wait_for  # noqa: E402

NS = "hub"
SERVICE = """
c.ComputeHubService.nodes = [{"name": "kube-gpu-1", "gpus": 4, "gpu_model": "a100", "cpu": 64, "memory": "512Gi"}]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 4, "cpu": 64, "memory": "512Gi"}, "groups": ["vision"]},
]
c.LauncherApp.backend_class = "spawner.launch_kube.KubeLauncher"
c.LauncherApp.poll_interval = 0.3
c.KubeLauncher.namespace = "hub"
c.KubeLauncher.kubeconfig = KUBECONFIG
c.KubeLauncher.container_start_grace = 0
c.KubeLauncher.unscheduled_grace = 2
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with launcher_hub(tmp_path_factory.mktemp("kube-failures"), SERVICE) as h:
        yield h


def submit(hub, gpus: int) -> str:
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json={
        "kind": "training", "queue": "vision", "resources": {"gpu": gpus, "cpu": 4, "memory": "16Gi"},
        "gpu_model": "a100", "metadata": {"job": {"command": ["python", "train.py"]}}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def get(hub, wid) -> dict:
    return hub.call("GET", f"/workloads/{wid}", hub.tokens["ada"]).json()


def pods(hub, wid) -> list[dict]:
    return [p for p in hub.cluster.objects("pods", NS) if p["metadata"]["labels"].get("computehub/workload") == wid]


def kubelet_writes(hub, pod: dict, status: dict) -> None:
    hub.cluster.run(hub.cluster.patch_pod_status(NS, pod["metadata"]["name"], status))


RUNNING = {"phase": "Running", "hostIP": "10.0.0.1", "containerStatuses": [{
    "name": "worker", "ready": True, "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}}]}


def test_an_image_pull_failure_fails_the_job_with_the_cause_and_frees_its_gpus(hub):
    wid = submit(hub, 4)
    [pod] = wait_for("its pod", lambda: pods(hub, wid), 30)
    kubelet_writes(hub, pod, {"phase": "Pending", "hostIP": "10.0.0.1", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": "registry.example/foo:bar", "imageID": "",
        "state": {"waiting": {"reason": "ImagePullBackOff",
                              "message": 'Back-off pulling image "registry.example/foo:bar"'}}}]})
    w = wait_for("failed", lambda: (x := get(hub, wid))["state"] in ("failed", "finished") and x, 60)
    assert w["state"] == "failed", w
    assert "could not be pulled: ImagePullBackOff: Back-off pulling image" in w["reason"], w
    # its 4 GPUs are free: a job asking for all of them runs
    other = submit(hub, 4)
    [pod] = wait_for("the next job's pod", lambda: pods(hub, other), 30)
    kubelet_writes(hub, pod, RUNNING)
    wait_for("the next job running", lambda: get(hub, other)["state"] == "running", 30)
    assert hub.call("DELETE", f"/workloads/{other}", hub.tokens["alice"]).status_code == 200


def test_a_pod_its_node_never_starts_is_requeued_with_the_reason_and_runs_again(hub):
    wid = submit(hub, 2)
    first = wait_for("its pod", lambda: pods(hub, wid), 30)[0]       # no kubelet ever takes it
    events = wait_for("node_lost and requeued", lambda: (
        e := hub.call("GET", f"/audit?workload={wid}", hub.tokens["ada"]).json().get("events", []))
        and {"node_lost", "requeued"} <= {x["kind"] for x in e} and e, 60)
    lost = next(e for e in events if e["kind"] == "node_lost")
    assert "worker 0 was not started by node kube-gpu-1 for " in lost["reason"], lost
    # admitted again, as a fresh Job whose pod a kubelet does take
    again = wait_for("a new pod", lambda: [p for p in pods(hub, wid)
                                           if p["metadata"]["uid"] != first["metadata"]["uid"]], 60)[0]
    kubelet_writes(hub, again, RUNNING)
    wait_for("running again", lambda: get(hub, wid)["state"] == "running" and get(hub, wid)["id"] == wid, 30)
    assert hub.call("DELETE", f"/workloads/{wid}", hub.tokens["alice"]).status_code == 200


def events(hub, wid) -> list[dict]:
    return hub.call("GET", f"/audit?workload={wid}", hub.tokens["ada"]).json().get("events", [])


@pytest.mark.parametrize("flag,words", [({"healthy": False}, "went away (NotReady or unreachable)"),
                                        ({"draining": True}, "was drained (cordoned, its pods evicted)")],
                         ids=["not-ready", "cordoned"])
def test_a_pod_gone_with_its_node_is_node_lost_and_requeued_not_the_users_failure(hub, flag, words):
    """Its node goes NotReady (or is cordoned): the inventory marks it so in the service; the node
    controller deletes the pod (a drain evicts it) before the launcher sees it go; the job
    controller fails the Job. The launcher, which may not read Nodes, asks the service with its
    own token (on-behalf: enough to read nodes) and reports node_lost: training requeues. Before,
    this was "failed ... deleted outside ComputeHub", the user's doing."""
    wid, name = running_one_gpu_job(hub)
    assert hub.call("PATCH", "/nodes/kube-gpu-1", hub.tokens["ada"], json=flag).status_code == 200
    try:
        hub.cluster.run(delete_pod_and_fail_job(hub, wid, name))
        evs = wait_for("node_lost and requeued", lambda: (e := events(hub, wid))
                       and {"node_lost", "requeued"} <= {x["kind"] for x in e} and e, 60)
        lost = next(e for e in evs if e["kind"] == "node_lost")
        assert f"worker 0: its node kube-gpu-1 {words}; its pod {name} is gone" in lost["reason"], lost
        assert get(hub, wid)["state"] == "pending"          # the only node takes no new work
    finally:
        assert hub.call("PATCH", "/nodes/kube-gpu-1", hub.tokens["ada"],
                        json={k: not v for k, v in flag.items()}).status_code == 200
    wait_for("admitted again", lambda: get(hub, wid)["state"] in ("admitted", "running"), 30)
    assert hub.call("DELETE", f"/workloads/{wid}", hub.tokens["alice"]).status_code == 200


def running_one_gpu_job(hub) -> tuple[str, str]:
    """A 1-GPU job running on its pod, seen by the launcher's looks: (workload id, pod name)."""
    wid = submit(hub, 1)
    [pod] = wait_for("its pod", lambda: pods(hub, wid), 30)
    kubelet_writes(hub, pod, RUNNING)
    wait_for("running", lambda: get(hub, wid)["state"] == "running", 30)
    time.sleep(1.5)         # the launcher's looks at it see its pod (it goes minutes later, say)
    return wid, pod["metadata"]["name"]


def test_a_pod_deleted_by_hand_on_a_healthy_node_fails_the_job_saying_so(hub):
    wid, name = running_one_gpu_job(hub)
    hub.cluster.run(delete_pod_and_fail_job(hub, wid, name))
    w = wait_for("failed", lambda: (x := get(hub, wid))["state"] in ("failed", "pending", "admitted") and x, 60)
    assert w["state"] == "failed", w
    assert w["reason"].startswith(f"worker 0: its pod {name} is gone (deleted outside ComputeHub, or with its "
                                  "node) (the Job failed: BackoffLimitExceeded)"), w
    assert "node_lost" not in {e["kind"] for e in events(hub, wid)}


async def delete_pod_and_fail_job(hub, wid: str, pod: str) -> None:
    """What the cluster writes: the pod deleted (kubectl, the node controller, a drain), then the
    Job failed by the job controller, which counts the pod failed (backoffLimit 0)."""
    async with hub.cluster.emulator.delete(f"/api/v1/namespaces/{NS}/pods/{pod}") as r:
        r.raise_for_status()
    await patch_status(hub.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{wid}/status", {
        "failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                     "message": "Job has reached the specified backoff limit"}]})
