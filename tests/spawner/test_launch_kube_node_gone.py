"""A job's pod that vanished (no trace of it left when its Job failed) is judged by its node as
ComputeHub's inventory has it, since the launcher's Role may not read Nodes (docs/launcher-kubernetes.md,
"When a pod fails"): a node the inventory removed, marks unhealthy (NotReady) or draining
(cordoned) took the pod with it: ``node_lost``, requeued by class. On a healthy node, or when the
service cannot say, someone deleted the pod: ``failed``, as before.

Real: the launcher driver (LauncherApp, its reconcile loop) with the KubeLauncher backend, talking
HTTP to the Kubernetes API through a kubeconfig. Emulated: the Kubernetes API (kmock); the job
controller (tests/spawner/kube_controllers.py makes the Job's pods; the test writes the Job's
Failed condition and deletes its pods, as the pod garbage collector or the node controller
would); the service: its reports are recorded (tests/spawner/launcher_alone.py) and GET
nodes/<name> is answered by a stand-in holding the inventory's view (end to end, with the real
service: tests/spawner/test_launch_kube_failures_hub.py).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_launch_kube_failures import NS, Driver, cluster, scenario, workload  # noqa: E402,F401 - the same fixture

from spawner.service_client import ServiceError  # noqa: E402

BACKOFF = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
           "message": "Job has reached the specified backoff limit"}
FINE = {"healthy": True, "draining": False}


class Inventory:
    """GET nodes/<name> as the service answers it (``nodes``: name → its view; absent: 404;
    ``down``: the service cannot be reached). Until ``settle()``, every node is fine and up: the
    scenario's view is what the inventory says once the pods went (a launcher that saw it while
    they started would judge them stranded: test_launch_kube_stranded.py)."""

    def __init__(self, nodes: dict, down: bool = False):
        self.final, self.down, self.asked, self.settled = nodes, down, [], False

    def settle(self) -> None:
        self.settled, self.asked = True, []

    @property
    def nodes(self) -> dict:
        return self.final if self.settled else {f"kube-gpu-{i}": FINE for i in (1, 2, 3)}

    async def request(self, method, path, body=None):
        self.asked.append((method, path))
        if self.down and self.settled:
            raise ServiceError(0, "unreachable", "ComputeHub at http://hub is unreachable")
        name = path.removeprefix("nodes/")
        if name not in self.nodes:
            raise ServiceError(404, "not_found", f"unknown node {name!r}")
        return {"name": name, **self.nodes[name]}


async def vanish(d: Driver, inventory: Inventory, w: dict, condition: dict = BACKOFF) -> list[str]:
    """``w`` runs; its pods vanish and its Job fails (``condition``). Its pods' names."""
    d.backend.service_client = lambda: inventory
    await d.admit(w)
    pods = [await d.worker(w["id"], i) for i in range(w["workers"])]
    await d.look(2)                 # the launcher has seen them
    inventory.settle()
    for pod in pods:
        await d.request("delete", f"/api/v1/namespaces/{NS}/pods/{pod}")
    await d.job_status(w["id"], {"failed": 1, "conditions": [condition]})
    return pods


@pytest.mark.parametrize("nodes,words", [
    ({}, "its node kube-gpu-1 went away (deleted from the cluster)"),
    ({"kube-gpu-1": {"healthy": False, "draining": False}}, "its node kube-gpu-1 went away (NotReady or unreachable)"),
    ({"kube-gpu-1": {"healthy": True, "draining": True}},
     "its node kube-gpu-1 was drained (cordoned, its pods evicted)"),
], ids=["removed", "unhealthy", "draining"])
def test_a_pod_gone_with_its_node_is_node_lost_naming_the_node(cluster, tmp_path, nodes, words):
    inventory = Inventory(nodes)

    async def body(d: Driver):
        w = workload("wgone0001")
        [pod] = await vanish(d, inventory, w)
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed.get("node_lost") is True, failed
        assert failed["reason"].startswith(f"node lost: worker 0: {words}; its pod {pod} is gone "
                                           "(the Job failed: BackoffLimitExceeded)"), failed
        assert inventory.asked == [("GET", "nodes/kube-gpu-1")]
    scenario(cluster, tmp_path, body)


@pytest.mark.parametrize("down", [False, True], ids=["healthy-node", "service-unreachable"])
def test_a_pod_gone_from_a_healthy_node_fails_the_job_as_deleted_by_hand(cluster, tmp_path, down):
    inventory = Inventory({"kube-gpu-1": FINE}, down=down)

    async def body(d: Driver):
        w = workload("wgone0002")
        [pod] = await vanish(d, inventory, w)
        failed = await d.until("failed", lambda: d.state("failed"))
        assert "node_lost" not in failed, failed
        assert failed["reason"].startswith(f"worker 0: its pod {pod} is gone (deleted outside ComputeHub, or with "
                                           "its node) (the Job failed: BackoffLimitExceeded)"), failed
        assert inventory.asked == [("GET", "nodes/kube-gpu-1")]
    scenario(cluster, tmp_path, body)


def test_the_worker_whose_node_went_is_named_and_each_node_is_asked_once(cluster, tmp_path):
    """Two workers on two nodes (bound by affinity: the node is the placement's); both pods go,
    only kube-gpu-2 is NotReady."""
    inventory = Inventory({"kube-gpu-1": FINE, "kube-gpu-2": {"healthy": False, "draining": False}})

    async def body(d: Driver):
        w = workload("wgone0003", workers=2)
        pods = await vanish(d, inventory, w)
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed.get("node_lost") is True, failed
        assert failed["reason"].startswith(f"node lost: worker 1: its node kube-gpu-2 went away (NotReady or "
                                           f"unreachable); its pod {pods[1]} is gone"), failed
        assert sorted(inventory.asked) == [("GET", "nodes/kube-gpu-1"), ("GET", "nodes/kube-gpu-2")]
    scenario(cluster, tmp_path, body)


def test_a_pod_gone_when_the_job_names_a_disruption_is_node_lost_whatever_its_node(cluster, tmp_path):
    """The Job's podFailurePolicy failed it on the pod's DisruptionTarget (evicted, preempted by
    the kube-scheduler), which the launcher did not see before the pod went: the cluster's doing.
    Before, a vanished pod was always the user's (failed), whatever the Job said."""
    inventory = Inventory({"kube-gpu-1": FINE})
    message = f"Pod {NS}/x has condition DisruptionTarget matching FailJob rule at index 0"

    async def body(d: Driver):
        w = workload("wgone0004")
        [pod] = await vanish(d, inventory, w, {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                                                "message": message})
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed.get("node_lost") is True, failed
        assert failed["reason"].startswith(f"node lost: worker 0: its pod {pod} is gone, disrupted: {message} "
                                           "(the Job failed: PodFailurePolicy)"), failed
    scenario(cluster, tmp_path, body)


def test_a_restarted_launcher_knows_the_pods_of_the_jobs_it_adopted(cluster, tmp_path):
    """A launcher that adopts a running Job (its pods all up: nothing makes it list them later)
    names a worker whose pod then vanishes with its node; before, it knew of no pod, and the
    end was the Job's own "BackoffLimitExceeded", failed."""
    from spawner.launch_kube import KubeLauncher

    async def body(d: Driver):
        w = workload("wgone0005")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        fresh = KubeLauncher(namespace=NS, kubeconfig=d.cluster.kubeconfig, logs_dir=str(tmp_path))
        gone = Inventory({})                                # the inventory removed kube-gpu-1
        gone.settle()
        fresh.service_client = lambda: gone
        try:
            assert await fresh.adopt(w) is True
            await d.request("delete", f"/api/v1/namespaces/{NS}/pods/{pod}")
            await d.job_status(w["id"], {"failed": 1, "conditions": [BACKOFF]})
            ended = await fresh.poll(w)
            assert ended.node_lost is True, ended
            assert ended.reason.startswith(f"worker 0: its node kube-gpu-1 went away (deleted from the cluster); "
                                           f"its pod {pod} is gone"), ended
        finally:
            await fresh.close()
    scenario(cluster, tmp_path, body)


@pytest.mark.parametrize("nodes,node_lost", [({}, True), ({"kube-gpu-1": FINE}, False)],
                         ids=["node-removed", "node-healthy"])
def test_pods_never_seen_are_judged_by_the_node_the_job_was_placed_on(cluster, tmp_path, nodes, node_lost):
    """A Job whose pods came up and went between two looks of the launcher (ready at once, so it
    never listed them; then gone with their node): judged by the placement's node as a pod seen
    there would be. Before, nothing named them and the node's loss failed the job for good."""
    inventory = Inventory(nodes)

    async def body(d: Driver):
        d.backend.service_client = lambda: inventory
        w = workload("wgone0006")
        d.held[w["id"]] = w
        await d.look()                                  # it starts the Job, which is ready at once
        deadline = time.monotonic() + 20
        while not d.objects("jobs", w["id"]) and time.monotonic() < deadline:     # (the start runs on; no look)
            await asyncio.sleep(0.05)
        await d.job_status(w["id"], {"active": 1, "ready": 1})
        while not d.pods(w["id"]) and time.monotonic() < deadline:    # (the controller makes it; no look)
            await asyncio.sleep(0.05)
        [pod] = [p["metadata"]["name"] for p in d.pods(w["id"])]
        await d.look(3)                                 # running, all ready: nothing to list
        inventory.settle()
        await d.request("delete", f"/api/v1/namespaces/{NS}/pods/{pod}")
        await d.job_status(w["id"], {"failed": 1, "conditions": [BACKOFF]})
        failed = await d.until("failed", lambda: d.state("failed"))
        if node_lost:
            assert failed.get("node_lost") is True, failed
            assert failed["reason"].startswith(
                "node lost: worker 0: its node kube-gpu-1 went away (deleted from the cluster); its pod "
                "(of Job ch-wgone0006) is gone (the Job failed: BackoffLimitExceeded)"), failed
        else:
            assert "node_lost" not in failed, failed
            assert "BackoffLimitExceeded" in failed["reason"], failed
        assert inventory.asked == [("GET", "nodes/kube-gpu-1")]
    scenario(cluster, tmp_path, body)
