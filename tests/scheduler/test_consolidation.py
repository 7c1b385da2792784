"""Consolidation: running work is moved to another node so that work its team is owed can
start when reclaim alone cannot (the free and borrowed GPUs are scattered over nodes)."""

import itertools

import pytest
from sched_helpers import cluster, job

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
