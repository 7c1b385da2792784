"""Consolidation for an owed gang: whole nodes cleared with reclaim and moves together, when
reclaim alone cannot give it the nodes (the borrowers may give back too little on any one
node) and too few GPUs are free for moves alone (``scheduler/gang_consolidation.py``)."""

from sched_helpers import cluster, job, one_job_per_node

from scheduler.model import ADMITTED, PENDING, PREEMPTING

QUEUES = [{"name": "a", "guaranteed": {"gpu": 16}}, {"name": "b", "guaranteed": {"gpu": 8}},
          {"name": "c", "guaranteed": {"gpu": 8}}]


def one_per_node(release=True, **cfg):
    """Three 8-GPU nodes, each running one 4-GPU job of b (placed best-fit two to a node, then
    every second one ends): 12 GPUs free, none whole; b uses 12 of its 8 and may give back 4,
    so reclaim clears one node at most."""
    s = cluster(nodes=3, gpus=8, queues=QUEUES, release=release, **cfg)
    kept = one_job_per_node(s, "b", "bob", [4] * 6)
    assert sorted(w.placement[0].node for w in kept) == ["n0", "n1", "n2"]
    return s, kept


def test_an_owed_gang_gets_one_node_by_reclaim_and_another_by_a_move():
    s, kept = one_per_node()
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    assert gang.state == ADMITTED
    gang_nodes = {a.node for a in gang.placement}
    assert len(gang_nodes) == 2
    stopped = {v.id for v, by in res.preempted if by.id == gang.id}
    assert len(stopped) == 2
    moved = [w for w in kept if w.metadata.get("moved_for") == gang.id]
    assert len(moved) == 1 and moved[0].state == ADMITTED          # restarted at once
    assert moved[0].placement[0].node not in gang_nodes and moved[0].preemptions == 1
    ev = s.events(workload_id=moved[0].id, kinds=("preempted",))
    assert "moved to another node" in ev[-1].reason and "whole nodes" in ev[-1].reason
    reclaimed = [w for w in kept if w.id in stopped and w not in moved]
    assert len(reclaimed) == 1 and reclaimed[0].state == PENDING    # borrowed: given back
    untouched = [w for w in kept if w.id not in stopped]
    assert len(untouched) == 1 and untouched[0].preemptions == 0
    assert s.state.tree.usage["b"]["gpu"] == 8                      # back at its guarantee, not below


def test_without_consolidation_the_owed_gang_waits():
    s, kept = one_per_node(consolidation_moves=0)
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    assert gang.state == PENDING and res.preempted == []


def test_a_gang_that_would_borrow_gets_no_reclaim():
    s, kept = one_per_node()
    s.put_queue({"name": "a", "parent": "org", "guaranteed": {"gpu": 8}}, now=50)
    gang = job(s, "a", gpus=8, workers=2, now=100)                 # 16 > its 8: it would borrow
    res = s.cycle(now=1000)
    assert gang.state == PENDING and res.preempted == []


def test_nothing_is_stopped_when_the_moved_work_would_have_nowhere_to_go():
    # c's 4-GPU job fills n2 beside b's: once n0 is cleared by reclaim (all b may give back),
    # the b job moved off n1 would find no room, and none may be reclaimed for it.
    s, kept = one_per_node()
    c4 = job(s, "c", user="cy", gpus=4, now=10)
    s.cycle(now=10)
    assert c4.placement[0].node == "n0"
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    assert gang.state == PENDING and res.preempted == []
    assert all(w.state == ADMITTED and w.preemptions == 0 for w in kept + [c4])


def test_fresh_work_is_neither_reclaimed_nor_moved_before_its_preempt_after():
    s, kept = one_per_node()
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=300)                  # b's jobs have run 300 s of the 600 s preempt_after
    assert gang.state == PENDING and res.preempted == []


def test_live_mode_the_gang_starts_once_both_have_stopped():
    s, kept = one_per_node(release=False)
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    stopping = [v for v, by in res.preempted if by.id == gang.id]
    assert len(stopping) == 2 and all(v.state == PREEMPTING for v in stopping)
    assert gang.state == PENDING and res.blockers[gang.id].code == "waiting_preemption"
    for t, v in enumerate(stopping):
        s.mark_stopped(v.id, now=1001 + t)
    s.cycle(now=1010)
    assert gang.state == ADMITTED
    moved = [w for w in kept if w.metadata.get("moved_for") == gang.id]
    assert len(moved) == 1 and moved[0].state == ADMITTED
    assert moved[0].placement[0].node not in {a.node for a in gang.placement}
    assert s.state.tree.usage["b"]["gpu"] == 8
