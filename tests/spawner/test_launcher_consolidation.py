"""Consolidation end to end: the real hub and proxy, the ComputeHub service and its managed
local launcher. Jobs are local processes; the two 8-GPU nodes are the service's inventory
(no GPUs here), which is what placement and consolidation work on. The same layout as
tests/scheduler/test_consolidation.py, through the REST API and real processes."""

import pytest
from launcherhub import get, py, running_launcher_hub, state_is, submit, wait_for

NODES_AND_QUEUES = """
c.ComputeHubService.nodes = [
    {"name": "n0", "gpus": 8, "gpu_model": "sim", "cpu": 16, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}},
    {"name": "n1", "gpus": 8, "gpu_model": "sim", "cpu": 16, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 8}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "guaranteed": {"gpu": 4}, "groups": ["nlp"]},
    {"name": "shared", "parent": "org", "guaranteed": {"gpu": 4}, "groups": ["vision"]},
]
"""

# Runs until SIGTERM, then records that it ran; started again, it says so and ends.
UNTIL_STOPPED = ("import os, signal, sys, time\n"
                 "ck = os.path.join(os.environ['COMPUTEHUB_CHECKPOINT_DIR'], 'ran')\n"
                 "def term(*_):\n"
                 "    open(ck, 'w').write('1'); sys.exit(0)\n"
                 "signal.signal(signal.SIGTERM, term)\n"
                 "if os.path.exists(ck): print('resumed', flush=True)\n"
                 "while True: time.sleep(0.05)\n")


@pytest.fixture(scope="module")
def chub(tmp_path_factory):
    with running_launcher_hub(tmp_path_factory.mktemp("chub"), NODES_AND_QUEUES) as hw:
        yield hw


def node_of(hub, wid):
    return get(hub, wid)["placement"][0]["node"]


def test_a_job_is_moved_so_that_work_its_team_is_owed_starts(chub):
    hub, work = chub

    # Batch work may be preempted at once (no preempt_after), so the test need not wait.
    def start(user, queue, gpus, code=UNTIL_STOPPED):
        w = submit(hub, user, py(code), work, kind="batch", gpus=gpus, queue=queue)
        return wait_for(f"{w['id']} to run", lambda: state_is(hub, w["id"], "running"))

    flag = work / "filler-done"
    b1 = start("carol", "nlp", 4)                                   # nlp at its guarantee
    c1 = start("bob", "shared", 2)
    filler = start("carol", "nlp", 2, f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.1)\n")
    cs = [start("bob", "shared", 2) for _ in range(3)]              # shared borrows 4 on n1
    assert {node_of(hub, w["id"]) for w in (b1, c1, filler)} == {"n0"}
    assert {node_of(hub, w["id"]) for w in cs} == {"n1"}
    flag.write_text("")
    wait_for("the filler to end", lambda: state_is(hub, filler["id"], "finished"))
    # vision uses nothing of its 8: owed. Reclaim alone clears no node (shared may give back
    # 4 GPUs, nlp none); moving one of shared's jobs from n1 to n0's 2 free GPUs does.
    owed = submit(hub, "alice", py("print('owed ran')"), work, kind="training", gpus=8, queue="vision")
    done = wait_for("the owed job to run", lambda: state_is(hub, owed["id"], "running", "finished"), 90)
    assert done["placement"][0]["node"] == "n1"
    moved = [w for w in cs if get(hub, w["id"])["metadata"].get("moved_for") == owed["id"]]
    assert len(moved) == 1, [get(hub, w["id"])["metadata"] for w in cs]
    m = wait_for("the moved job to run again", lambda: state_is(hub, moved[0]["id"], "running"), 60)
    assert m["placement"][0]["node"] == "n0" and m["preemptions"] == 1, m
    wait_for("the moved job to say it resumed from its checkpoint", lambda: "resumed" in hub.call(
        "GET", f"/workloads/{m['id']}/logs", hub.tokens["bob"]).json()["lines"], 30)
    assert state_is(hub, b1["id"], "running") and state_is(hub, c1["id"], "running")
