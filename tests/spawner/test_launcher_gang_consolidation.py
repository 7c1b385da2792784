"""Consolidation for an owed gang end to end: the real hub and proxy, the ComputeHub service and
its managed local launcher. Jobs are local processes; the three 8-GPU nodes are the service's
inventory (no GPUs here), which is what placement, reclaim and consolidation work on. The
same layout as tests/scheduler/test_gang_consolidation.py, through the REST API and real
processes."""

import pytest
from launcherhub import get, py, running_launcher_hub, state_is, submit, wait_for
from test_launcher_consolidation import UNTIL_STOPPED, node_of

NODES_AND_QUEUES = """
c.ComputeHubService.nodes = [
    {"name": f"n{i}", "gpus": 8, "gpu_model": "sim", "cpu": 16, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}} for i in range(3)
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 16}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "guaranteed": {"gpu": 8}, "groups": ["nlp"]},
]
"""


@pytest.fixture(scope="module")
def chub(tmp_path_factory):
    with running_launcher_hub(tmp_path_factory.mktemp("chub"), NODES_AND_QUEUES) as hw:
        yield hw


def test_an_owed_gang_gets_one_node_by_reclaim_and_one_by_moving_a_job(chub):
    hub, work = chub

    # Batch work may be preempted at once (no preempt_after), so the test need not wait.
    def start(code=UNTIL_STOPPED):
        w = submit(hub, "carol", py(code), work, kind="batch", gpus=4, queue="nlp")
        return wait_for(f"{w['id']} to run", lambda: state_is(hub, w["id"], "running"))

    flag = work / "fillers-done"
    filler = f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.1)\n"
    kept, fillers = [], []
    for _ in range(3):                      # best-fit: a kept job and a filler on each node
        kept.append(start())
        fillers.append(start(filler))
    assert sorted(node_of(hub, w["id"]) for w in kept) == ["n0", "n1", "n2"]
    flag.write_text("")
    for f in fillers:
        wait_for("the fillers to end", lambda: state_is(hub, f["id"], "finished"))
    # nlp runs 12 of its 8 GPUs, one job of 4 on each node: 12 GPUs free, no node whole.
    # vision is owed its 16; reclaim can clear one node (nlp may give back 4), and moves alone
    # cannot (12 free < 16). Reclaim on one node and a move off another together can.
    gang = submit(hub, "alice", py("print('gang ran')"), work, kind="training", gpus=8, workers=2,
                  queue="vision")
    done = wait_for("the gang to run", lambda: state_is(hub, gang["id"], "running", "finished"), 90)
    gang_nodes = {a["node"] for a in done["placement"]}
    assert len(gang_nodes) == 2, done
    moved = [w for w in kept if get(hub, w["id"])["metadata"].get("moved_for") == gang["id"]]
    assert len(moved) == 1, [get(hub, w["id"])["metadata"] for w in kept]
    m = wait_for("the moved job to run again", lambda: state_is(hub, moved[0]["id"], "running"), 60)
    assert m["placement"][0]["node"] not in gang_nodes and m["preemptions"] == 1, m
    wait_for("the moved job to say it resumed from its checkpoint", lambda: "resumed" in hub.call(
        "GET", f"/workloads/{m['id']}/logs", hub.tokens["carol"]).json()["lines"], 30)
    others = [get(hub, w["id"]) for w in kept if w is not moved[0]]
    assert sorted(w["preemptions"] for w in others) == [0, 1]      # one reclaimed, one untouched
