"""A pod no kubelet has taken, bound to a node that ComputeHub's inventory says is deleted or
NotReady, will never start: its admission goes back at once (``node_lost``, requeued by class)
rather than after ``unscheduled_grace`` (five minutes by default). A node that is only drained
(cordoned), or healthy, still starts what is bound to it: that pod waits as before.

Real: the launcher driver with the KubeLauncher backend over HTTP. Emulated: the Kubernetes API
(kmock), the job controller (tests/spawner/kube_controllers.py), a ReplicaSet (the test makes
the replica), and the service's GET nodes/<name> (a stand-in holding the inventory's view)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_launch_kube_failures import Driver, cluster, scenario, workload  # noqa: E402,F401 - the same fixture
from test_launch_kube_node_gone import FINE, Inventory  # noqa: E402

WORDS = {"deleted": "its node kube-gpu-1 went away (deleted from the cluster)",
         "not ready": "its node kube-gpu-1 went away (NotReady or unreachable)"}
VIEWS = {"deleted": {}, "not ready": {"kube-gpu-1": {"healthy": False, "draining": False}}}


@pytest.mark.parametrize("state", ["deleted", "not ready"])
def test_a_job_pod_bound_to_a_gone_node_gives_its_admission_back_at_once(cluster, tmp_path, state):
    inventory = Inventory(VIEWS[state])
    inventory.settle()

    async def body(d: Driver):
        d.backend.service_client = lambda: inventory
        w = workload("wstr00001")
        await d.admit(w)                              # its pod: Pending, bound to kube-gpu-1, no kubelet takes it
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed.get("node_lost") is True, failed
        assert failed["reason"].startswith(f"node lost: worker 0 cannot start: {WORDS[state]}"), failed
    scenario(cluster, tmp_path, body)                 # unscheduled_grace stays 300 s


def test_an_inference_replica_bound_to_a_gone_node_too(cluster, tmp_path):
    """Kubernetes replaces a replica lost with its node by one bound to the same node, which never
    starts: before, the service waited out unscheduled_grace to learn it."""
    inventory = Inventory({})
    inventory.settle()

    async def body(d: Driver):
        d.backend.service_client = lambda: inventory
        w = workload("wstr00002", kind="inference")
        await d.admit(w)
        pod = await d.replica(w["id"], f"ch-{w['id']}-5d8f-abcde")
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed.get("node_lost") is True, failed
        assert failed["reason"].startswith(f"node lost: replica {pod} cannot start: {WORDS['deleted']}"), failed
    scenario(cluster, tmp_path, body)


@pytest.mark.parametrize("view", [{"kube-gpu-1": FINE}, {"kube-gpu-1": {"healthy": True, "draining": True}}],
                         ids=["healthy", "drained"])
def test_a_pod_on_a_healthy_or_drained_node_waits_and_the_node_is_asked_once_in_a_while(cluster, tmp_path, view):
    inventory = Inventory(view)
    inventory.settle()

    async def body(d: Driver):
        d.backend.service_client = lambda: inventory
        w = workload("wstr00003")
        await d.admit(w)
        await d.worker(w["id"], 0)
        await d.look(5)
        assert d.state("failed") is None, d.reports   # a kubelet may still take it
        assert inventory.asked and len(inventory.asked) <= 2, inventory.asked      # not at every look
    scenario(cluster, tmp_path, body)


def test_a_node_back_since_its_last_answer_strands_nothing(cluster, tmp_path):
    """The node's state is taken as known for a few seconds, but a pod is judged stranded only on
    an answer of now: a node back in the inventory (Ready again, work admitted to it at once)
    does not send that work back."""
    inventory = Inventory(VIEWS["not ready"])
    inventory.settle()

    async def body(d: Driver):
        d.backend.service_client = lambda: inventory
        first = workload("wstr00004")
        await d.admit(first)
        await d.until("the first failed", lambda: d.state("failed"))
        inventory.final = {"kube-gpu-1": FINE}             # Ready again
        d.reports.clear()
        second = workload("wstr00005")
        await d.admit(second)
        await d.worker(second["id"], 0)
        await d.look(3)
        assert d.state("failed") is None, d.reports
    scenario(cluster, tmp_path, body)
