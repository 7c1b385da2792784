"""Consolidation: running work is moved to another node so that work its team is owed can
start when reclaim alone cannot (the free and borrowed GPUs are scattered over nodes)."""

import itertools

import pytest
from sched_helpers import cluster, job, one_job_per_node

from scheduler.model import ADMITTED, PENDING, PREEMPTING
from scheduler.config import EngineConfig
from traitlets import TraitError

QUEUES = [{"name": "a", "guaranteed": {"gpu": 8}}, {"name": "b", "guaranteed": {"gpu": 4}},
          {"name": "c", "guaranteed": {"gpu": 4}}]


def fragmented(release=True, cores=None, requeue=True, **cfg):
    """n0: b's 4 GPUs + one 2-GPU job of c + 2 free; n1: three 2-GPU jobs of c + 2 free.
    c borrows 4 (8 of its 4). No node can be cleared for 8 GPUs by reclaim alone: c may give
    back only 4, and b is at its guarantee."""
    s = cluster(nodes=2, gpus=8, queues=QUEUES, release=release, **cfg)
    if not requeue:      # training as it is, except that a preempted job ends
        s.put_class({**s.state.classes["training"].to_dict(), "requeue": False}, now=0)
    cpu = {"resources": {"gpu": 2, "cpu": cores}} if cores else {}
    b1 = job(s, "b", user="bob", gpus=4, now=0, **({"resources": {"gpu": 4, "cpu": cores}} if cores else {}))
    c1 = job(s, "c", user="cy", gpus=2, now=0, **cpu)
    filler = job(s, "b", user="bob", gpus=2, now=0)
    s.cycle(now=0)
    small = {"resources": {"gpu": 2, "cpu": cores * 2 // 3}} if cores else {}
    cs = [job(s, "c", user="cy", gpus=2, now=10, **small) for _ in range(3)]
    s.cycle(now=10)
    s.mark_finished(filler.id, now=20)
    assert {w.placement[0].node for w in (b1, c1)} == {"n0"}
    assert {w.placement[0].node for w in cs} == {"n1"}
    return s, b1, c1, cs


def test_owed_work_starts_after_one_job_is_moved_to_where_it_still_fits():
    s, b1, c1, cs = fragmented()
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    assert owed.state == ADMITTED and owed.placement[0].node == "n1"
    preempted = {v.id for v, by in res.preempted if by.id == owed.id}
    assert preempted == {w.id for w in cs}                     # two reclaimed, one moved
    moved = [w for w in cs if w.state == ADMITTED]
    assert len(moved) == 1 and moved[0].placement[0].node == "n0"     # started again at once
    assert sorted(w.state for w in cs if w is not moved[0]) == [PENDING, PENDING]
    assert s.state.tree.usage["c"]["gpu"] == 4                 # back at its guarantee, not below
    assert b1.state == ADMITTED and c1.state == ADMITTED        # b at its guarantee: untouched
    ev = s.events(workload_id=moved[0].id, kinds=("preempted",))
    assert "moved to another node" in ev[-1].reason and "consolidation" in ev[-1].reason
    assert moved[0].preemptions == 1


def test_the_small_job_is_moved_when_the_large_one_beside_it_would_fit_nowhere():
    # n0: notebooks of a and b (never moved) + 2 free; n1: b's 4-GPU and 1-GPU jobs + 3 free.
    # a (3 of 8) is owed 4 GPUs and no node has them free; nobody borrows (b holds its 8).
    # Moving b's 4-GPU job first clears n1 but leaves it nowhere to go: the 1-GPU job is moved.
    s = cluster(nodes=2, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}},
                                         {"name": "b", "guaranteed": {"gpu": 8}}])
    notebooks = [job(s, "a", gpus=3, kind="notebook", now=0),
                 job(s, "b", user="bob", gpus=3, kind="notebook", now=0)]
    filler = job(s, "a", gpus=2, now=0)
    s.cycle(now=0)
    large, small = job(s, "b", user="bob", gpus=4, now=10), job(s, "b", user="bob", gpus=1, now=10)
    s.cycle(now=10)
    s.mark_finished(filler.id, now=20)
    assert {w.placement[0].node for w in notebooks} == {"n0"}
    assert {w.placement[0].node for w in (large, small)} == {"n1"}
    owed = job(s, "a", gpus=4, now=100)
    res = s.cycle(now=1000)
    assert owed.state == ADMITTED and owed.placement[0].node == "n1"
    assert [(v.id, by.id) for v, by in res.preempted] == [(small.id, owed.id)]
    assert small.state == ADMITTED and small.placement[0].node == "n0"
    assert large.state == ADMITTED and large.placement[0].node == "n1"
    assert s.state.tree.usage["b"]["gpu"] == 8


def test_without_consolidation_the_owed_work_waits():
    s, *_ = fragmented(consolidation_moves=0)
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    assert owed.state == PENDING and res.preempted == []


def test_nothing_is_moved_when_it_would_not_fit_elsewhere():
    # b's and c's jobs on n0 ask for 30 of its 64 cores, those on n1 for 20: n0 has 2 GPUs
    # free but 4 cores, so a job
    # moved off n1 would have nowhere to go, and b's job on n0 does not fit on n1 (2 GPUs).
    s, b1, c1, cs = fragmented(cores=30)
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    assert owed.state == PENDING and res.preempted == []
    assert all(w.state == ADMITTED for w in cs)


def test_work_whose_class_does_not_requeue_is_never_moved():
    s, b1, c1, cs = fragmented(requeue=False)        # a move would end it
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    assert owed.state == PENDING and res.preempted == []
    assert all(w.state == ADMITTED for w in cs)


def test_fresh_work_is_not_moved_before_its_class_preempt_after():
    s, b1, c1, cs = fragmented()
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=300)                 # c's jobs have run 290 s of the 600 s preempt_after
    assert owed.state == PENDING and res.preempted == []


def test_work_that_only_borrows_is_not_consolidated_for():
    s, b1, c1, cs = fragmented()
    job(s, "a", gpus=2, now=50)
    s.cycle(now=50)                                            # a now uses 2 of its 8
    big = job(s, "a", user="al", gpus=8, now=100)              # 2 + 8 > 8: it would borrow
    res = s.cycle(now=1000)
    assert big.state == PENDING and res.preempted == []


@pytest.mark.parametrize("stop_order", list(itertools.permutations(range(3))))
def test_live_mode_moves_by_stopping_and_the_moved_work_comes_back_first(stop_order):
    s, b1, c1, cs = fragmented(release=False)
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    stopping = [v for v, _ in res.preempted]
    assert {v.id for v in stopping} == {w.id for w in cs} and all(v.state == PREEMPTING for v in stopping)
    assert owed.state == PENDING and res.blockers[owed.id].code == "waiting_preemption"
    # Whichever stops first, the reclaimed jobs wait for the owed one, so that they do not
    # take the room planned for the moved one (n0's 2 free GPUs).
    t = 1001
    for k in stop_order:
        s.mark_stopped(stopping[k].id, now=t)
        res = s.cycle(now=t + 1)
        t += 2
        for v in stopping:
            if v.state == PENDING and not v.metadata.get("moved_for"):
                assert res.blockers[v.id].code == "made_room"
                assert f"once a workload {owed.id} has started" in res.blockers[v.id].text()
    assert owed.state == ADMITTED and owed.placement[0].node == "n1"
    moved = [w for w in cs if w.metadata.get("moved_for") == owed.id]
    assert len(moved) == 1 and moved[0].state == ADMITTED and moved[0].placement[0].node == "n0"
    assert sorted(w.state for w in cs) == [ADMITTED, PENDING, PENDING]
    res = s.cycle(now=t)
    assert not any(b.code == "made_room" for b in res.blockers.values())   # released once it started


@pytest.mark.parametrize("bad", [-1, "two"])
def test_invalid_move_limits_are_refused(bad):
    with pytest.raises(TraitError):
        EngineConfig(consolidation_moves=bad)


# --- gangs: whole nodes cleared by moving one-node work ---------------------------------

GANG_QUEUES = [{"name": "a", "guaranteed": {"gpu": 16}}, {"name": "b", "guaranteed": {"gpu": 16}}]


def scattered(sizes=(4, 4, 4, 4, 2, 6, 2, 6), release=True, **cfg):
    """Four 8-GPU nodes; b's jobs of ``sizes`` are placed best-fit, then every second one (the
    fillers) ends. Default: n0 and n1 run a 4-GPU job of b (4 free each), n2 and n3 a 2-GPU
    one (6 free each): 20 GPUs free, no node whole, b within its guarantee (12 of 16)."""
    s = cluster(nodes=4, gpus=8, queues=GANG_QUEUES, release=release, **cfg)
    kept = one_job_per_node(s, "b", "bob", sizes)
    assert len({w.placement[0].node for w in kept}) == 4
    return s, kept


def test_a_gang_gets_whole_nodes_by_moving_the_smallest_work_elsewhere():
    s, kept = scattered()
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    assert gang.state == ADMITTED
    small = [w for w in kept if w.request["gpu"] == 2]
    assert {v.id for v, by in res.preempted if by.id == gang.id} == {w.id for w in small}
    gang_nodes = {a.node for a in gang.placement}
    assert len(gang_nodes) == 2
    for w in small:           # restarted at once on the nodes that had room
        assert w.state == ADMITTED and w.placement[0].node not in gang_nodes
        assert w.metadata["moved_for"] == gang.id and w.preemptions == 1
        ev = s.events(workload_id=w.id, kinds=("preempted",))
        assert "moved to another node" in ev[-1].reason and "whole nodes" in ev[-1].reason
    assert all(w.state == ADMITTED and w.preemptions == 0 for w in kept if w not in small)
    assert s.state.tree.usage["b"]["gpu"] == 12


def test_without_consolidation_the_gang_waits():
    s, kept = scattered(consolidation_moves=0)
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    assert gang.state == PENDING and res.preempted == []


def test_a_gang_moves_nothing_when_the_moved_work_would_have_nowhere_to_go():
    # Six nodes each run a 5-GPU job of b: 18 GPUs free, more than the gang's 16, but a job
    # moved off a node it clears would need 5 free GPUs, and every other node has 3.
    s = cluster(nodes=6, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 16}},
                                         {"name": "b", "guaranteed": {"gpu": 32}}])
    held = [job(s, "b", user="bob", gpus=5, now=0) for _ in range(6)]
    s.cycle(now=0)
    assert len({w.placement[0].node for w in held}) == 6
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=1000)
    assert gang.state == PENDING and res.preempted == []
    assert all(w.state == ADMITTED and w.preemptions == 0 for w in held)


def test_a_gang_is_not_moved_for_before_the_work_has_run_its_preempt_after():
    s, kept = scattered()
    gang = job(s, "a", gpus=8, workers=2, now=100)
    res = s.cycle(now=300)
    assert gang.state == PENDING and res.preempted == []


def test_a_gang_its_quota_holds_back_moves_nothing():
    # a may use 10 cores; a CPU job of a holds 4, and the gang asks for 8 more: a move would
    # not let it start, so none is made.
    s, kept = scattered()
    s.put_queue({"name": "a", "parent": "org", "guaranteed": {"gpu": 16}, "limit": {"cpu": 10}}, now=50)
    cpu_job = job(s, "a", gpus=0, now=50, resources={"cpu": 4})
    s.cycle(now=50)
    assert cpu_job.state == ADMITTED
    gang = job(s, "a", gpus=8, workers=2, now=100, resources={"gpu": 8, "cpu": 4})
    res = s.cycle(now=1000)
    assert gang.state == PENDING and res.preempted == []
    assert res.blockers[gang.id].code == "queue_limit"


# --- moved work's room made by reclaim on another node -------------------------------------

def borrowed_everywhere(c2_at=0):
    """Three 8-GPU nodes, none free: c (no guarantee: all it runs is borrowed) runs 6 GPUs
    beside b's 2 on one node and 2 beside b's 6 on another; d fills the third. a is owed 8.
    Reclaim alone frees at most 6 on one node, and b's jobs have no free room to move to."""
    s = cluster(nodes=3, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}}, {"name": "b", "guaranteed": {"gpu": 8}},
                                         {"name": "c", "guaranteed": {"gpu": 0}}, {"name": "d", "guaranteed": {"gpu": 8}}])
    c6 = job(s, "c", user="cy", gpus=6, now=0)
    s.cycle(now=0)
    b2 = job(s, "b", user="bob", gpus=2, now=1)
    s.cycle(now=1)
    c2 = job(s, "c", user="cy", gpus=2, now=c2_at + 2)
    s.cycle(now=c2_at + 2)
    b6 = job(s, "b", user="bob", gpus=6, now=c2_at + 3)
    s.cycle(now=c2_at + 3)
    d8 = job(s, "d", user="di", gpus=8, now=c2_at + 4)
    s.cycle(now=c2_at + 4)
    node = {w.id: w.placement[0].node for w in (c6, b2, c2, b6, d8)}
    assert node[c6.id] == node[b2.id] and node[c2.id] == node[b6.id] and len(set(node.values())) == 3
    return s, c6, b2, c2, b6, d8


def test_moved_work_lands_where_reclaim_frees_room_on_another_node():
    s, c6, b2, c2, b6, d8 = borrowed_everywhere()
    cleared = c6.placement[0].node
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    assert owed.state == ADMITTED and owed.placement[0].node == cleared
    assert {v.id for v, by in res.preempted if by.id == owed.id} == {c6.id, c2.id, b2.id}
    assert b2.state == ADMITTED and b2.placement[0].node == b6.placement[0].node   # where c2 ran
    assert b2.metadata["moved_for"] == owed.id
    assert c6.state == PENDING and c2.state == PENDING          # borrowed: given back
    assert b6.state == ADMITTED and d8.state == ADMITTED and b6.preemptions == d8.preemptions == 0
    assert s.state.tree.usage["b"]["gpu"] == 8 and s.state.tree.usage["c"].get("gpu", 0) == 0


def test_no_room_is_reclaimed_for_moved_work_from_work_too_fresh_to_stop():
    s, c6, b2, c2, b6, d8 = borrowed_everywhere(c2_at=500)     # c2 has run 498 s of 600 at 1000
    owed = job(s, "a", gpus=8, now=600)
    res = s.cycle(now=1000)
    assert owed.state == PENDING and res.preempted == []
