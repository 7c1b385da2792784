"""Orders by service received (SRTF, Tiresias-L's 2D-LAS), the expansion-factor order, and the
guarantee rules of the default order — through the Scheduler API."""

import pytest
from sched_helpers import cluster, job
from traitlets import TraitError

from scheduler import EngineConfig, Scheduler
from scheduler.model import ADMITTED, PENDING, PREEMPTING
from scheduler.policies import RAN, attained, expansion, las_level, next_change, remaining


def one_queue(order, gpus=8, **cfg):
    cfg.setdefault("release_on_preempt", True)
    s = Scheduler(config=EngineConfig(order=order, backfill="skip", **cfg))
    s.put_node({"name": "n0", "gpus": gpus, "cpu": 64, "memory": "256Gi"}, now=0)
    s.put_queue({"name": "all", "guaranteed": {"gpu": gpus}}, now=0)
    return s


def test_srtf_orders_by_declared_limit_minus_time_run():
    s = one_queue("srtf")
    a = job(s, "all", gpus=8, time_limit=10_000, now=0)
    s.cycle(now=0)
    b = job(s, "all", gpus=8, time_limit=5_000, now=1)
    c = job(s, "all", gpus=8, now=2)                    # no limit: last, never preferred
    assert remaining(a, 4_000) == 6_000
    # At 700 a has 9,300 s left, more than b's 5,000, and has run past training's 600 s: b preempts it.
    res = s.cycle(now=700)
    assert [w.id for w in res.admitted] == [b.id]
    assert [(v.id, by.id) for v, by in res.preempted] == [(a.id, b.id)]
    assert a.state == PENDING and a.metadata[RAN] == 700
    # Back in line, a keeps what it ran: 9,300 left, still ahead of c (unknown).
    assert [w.id for w in s.engine.order()] == [a.id, c.id]
    assert remaining(a, 10**6) == 9_300


def test_srtf_does_not_preempt_for_work_that_is_not_shorter():
    s = one_queue("srtf")
    a = job(s, "all", gpus=8, time_limit=1_000, now=0)
    s.cycle(now=0)
    job(s, "all", gpus=8, time_limit=5_000, now=1)
    job(s, "all", gpus=8, now=2)
    res = s.cycle(now=700)
    assert not res.preempted and a.state == ADMITTED


def test_las_levels_and_preemption_of_work_that_had_more_service():
    s = one_queue("las", las_thresholds=[3600.0])
    a = job(s, "all", gpus=4, now=0)
    b = job(s, "all", gpus=4, now=0)
    s.cycle(now=0)
    assert las_level(a, 899, [3600.0]) == 0 and las_level(a, 901, [3600.0]) == 1   # 4 GPUs × 900 s
    assert attained(a, 1000) == 4000 and next_change(a, 0, [3600.0]) == 900
    c = job(s, "all", gpus=4, now=100)                  # level 0; a and b are level 1 from t=900
    res = s.cycle(now=500)
    assert not res.preempted                            # same level: first come, first served
    res = s.cycle(now=1000)
    assert [by.id for _, by in res.preempted] == [c.id] and c.state == ADMITTED
    (victim, _), = res.preempted
    assert victim in (a, b) and victim.state == PENDING and victim.metadata[RAN] == 1000


def test_las_thresholds_must_increase():
    with pytest.raises(TraitError):
        EngineConfig(las_thresholds=[7200.0, 3600.0])
    with pytest.raises(TraitError):
        EngineConfig(las_thresholds=[0.0])


def test_service_orders_never_preempt_work_of_a_higher_rank():
    s = one_queue("srtf")
    nb = job(s, "all", gpus=8, kind="notebook", now=0)   # interactive: not preemptible
    s.cycle(now=0)
    short = job(s, "all", gpus=8, time_limit=10, now=1)
    res = s.cycle(now=5_000)
    assert not res.preempted and nb.state == ADMITTED and short.state == PENDING


def test_expansion_factor_order_prefers_short_declared_work_and_ages_everything():
    s = cluster(nodes=1, gpus=8, expansion_order=True)
    hog = job(s, "a", gpus=8, now=0)
    s.cycle(now=0)
    long = job(s, "a", gpus=8, time_limit=36_000, now=1)
    short = job(s, "a", gpus=8, time_limit=600, now=2)
    s.cycle(now=3)
    assert [w.id for w in s.engine.order()] == [short.id, long.id]
    assert expansion(short, 602, 86400) == pytest.approx(2.0)
    assert expansion(hog, 86400, 86400) == pytest.approx(2.0)     # no limit: counts as a day
    # Without it (expansion_order=False): age decides.
    s2 = cluster(nodes=1, gpus=8, expansion_order=False)
    job(s2, "a", gpus=8, now=0)
    s2.cycle(now=0)
    l2 = job(s2, "a", gpus=8, time_limit=36_000, now=1)
    s2_short = job(s2, "a", gpus=8, time_limit=600, now=2)
    s2.cycle(now=3)
    assert [w.id for w in s2.engine.order()] == [l2.id, s2_short.id]


def test_a_queue_below_its_guarantee_goes_before_borrowers():
    # b borrowed everything; when a GPU frees up, a (below its guarantee) gets it, though
    # b used less in fair share and its work is older.
    s = cluster(nodes=1, gpus=8)        # a and b guaranteed 4 each
    held = [job(s, "b", gpus=1, now=0) for _ in range(8)]
    s.cycle(now=0)
    b_next = job(s, "b", gpus=1, now=1)
    a_next = job(s, "a", gpus=1, now=2)
    s.mark_finished(held[0].id, now=10)
    res = s.cycle(now=10)
    assert [w.id for w in res.admitted] == [a_next.id] and b_next.state == PENDING


def test_a_borrowers_reservation_does_not_hold_back_another_queues_guarantee():
    # b's 4-GPU job would borrow (b is guaranteed 4 and runs 2) and reserves the node; a's job
    # fits in a's guarantee and starts at once on what the reservation would have kept idle.
    s = cluster(nodes=1, gpus=8, backfill="reserve")
    running = [job(s, "b", gpus=2, time_limit=1_000, now=0), job(s, "a", gpus=3, time_limit=1_000, now=0)]
    s.cycle(now=0)
    big = job(s, "b", gpus=4, now=1)
    mine = job(s, "a", gpus=1, time_limit=50_000, now=2)      # ends after the reservation's start
    res = s.cycle(now=3)
    assert res.reservations and res.reservations[0].workload is big
    assert [w.id for w in res.admitted] == [mine.id]
    assert all(w.state == ADMITTED for w in running) and big.state == PENDING


@pytest.mark.parametrize("setting", ["guarantees", "no guarantees", "no consolidation"])
def test_work_larger_than_its_queues_guarantee_holds_no_reservation_while_others_are_guaranteed(setting):
    # 2 nodes x 8 GPUs. a's 2 x 8 gang is first in line and blocked: b's job holds half of n0.
    # With a and b guaranteed 8 each, the gang can only ever run on GPUs b leaves free: it holds
    # no reservation, and b's borrowing 8-GPU job (it ends after the gang could start) takes n1.
    # Where no queue is guaranteed anything, or consolidation (which can clear whole nodes for a
    # gang) is off, EASY backfill reserves for the gang as for any head.
    guaranteed = setting != "no guarantees"
    queues = [{"name": q, **({"guaranteed": {"gpu": 8}} if guaranteed else {})} for q in ("a", "b")]
    moves = {"consolidation_moves": 0} if setting == "no consolidation" else {}
    s = cluster(nodes=2, gpus=8, backfill="reserve", expansion_order=False, queues=queues, **moves)
    job(s, "b", user="bob", gpus=4, time_limit=1_000, now=0)
    s.cycle(now=0)
    gang = job(s, "a", gpus=8, workers=2, time_limit=1_000, now=1)
    later = job(s, "b", user="bob", gpus=8, time_limit=50_000, now=2)
    res = s.cycle(now=3)
    assert gang.state == PENDING and res.blockers[gang.id].code == "capacity"
    if setting == "guarantees":
        assert res.reservations == [] and later.state == ADMITTED
    else:
        assert [r.workload for r in res.reservations] == [gang]
        assert later.state == PENDING and res.blockers[later.id].code == "reserved"


@pytest.mark.parametrize("b_borrows", [True, False])
def test_a_reservation_for_work_that_would_borrow_holds_back_its_own_owed_work_only_if_none_is_lent(b_borrows):
    # a is guaranteed 4 of the 8 GPUs. Its 4-GPU job would take a beyond that (it must borrow) and
    # reserves the node; a's 1-GPU job is owed (a is below its guarantee). While b borrows, the
    # reservation must not keep a below its guarantee: the small job starts. With nothing lent,
    # the reservation holds it back as EASY backfill does (the big job would otherwise starve):
    # b's work ends late, so the free GPU is one the big job needs when a's work has ended.
    s = cluster(nodes=1, gpus=8, backfill="reserve", expansion_order=False)
    a_running = [job(s, "a", gpus=1, time_limit=1_000, now=0) for _ in range(3 if b_borrows else 4)]
    b_running = [job(s, "b", gpus=1, time_limit=100_000, now=0) for _ in range(5 if b_borrows else 4)]
    s.cycle(now=0)
    assert all(w.state == ADMITTED for w in a_running + b_running)
    big = job(s, "a", gpus=4, now=1)
    small = job(s, "a", gpus=1, time_limit=50_000, now=2)     # ends after the reservation's start
    s.mark_finished(a_running[0].id, now=10)
    res = s.cycle(now=10)
    assert res.reservations and res.reservations[0].workload is big
    if b_borrows:
        assert [w.id for w in res.admitted] == [small.id]
    else:
        assert res.admitted == [] and res.blockers[small.id].code == "reserved"
    assert big.state == PENDING


def test_a_preempted_victim_that_still_stops_is_not_counted_twice():
    s = one_queue("srtf", release_on_preempt=False)
    a = job(s, "all", gpus=8, time_limit=10_000, now=0)
    s.cycle(now=0)
    job(s, "all", gpus=8, time_limit=100, now=1)
    res = s.cycle(now=700)
    assert res.preempted and a.state == PREEMPTING
    assert remaining(a, 800) == 10_000 - 700      # charged once at the decision; no more while stopping


@pytest.mark.parametrize("stretch", [8.0, 0.0])
def test_work_larger_than_its_guarantee_holds_a_reservation_once_it_has_waited_long_for_its_size(stretch):
    # a's 2 × 8 gang (declaring 1,000 s) is larger than a's guarantee of 8 and b holds both
    # nodes, so at first it holds no reservation. Once it has waited 7 times its declared limit
    # (expansion factor 8, the default oversize_reservation_stretch) it holds one: b's next
    # long job no longer starts on what would hold the gang back. With 0 it never does.
    queues = [{"name": q, "guaranteed": {"gpu": 8}} for q in ("a", "b")]
    s = cluster(nodes=2, gpus=8, backfill="reserve", expansion_order=False, queues=queues,
                oversize_reservation_stretch=stretch)
    job(s, "b", user="bob", gpus=4, time_limit=100_000, now=0)
    job(s, "b", user="bob", gpus=8, time_limit=1_000_000, now=0)
    s.cycle(now=0)
    gang = job(s, "a", gpus=8, workers=2, time_limit=1_000, now=1)
    assert s.cycle(now=2).reservations == []
    reason = s.explain(gang.id, now=2)["reason"]
    assert ("(none are held for it until it has waited 117 min)" in reason) == bool(stretch), reason
    late = job(s, "b", user="bob", gpus=4, time_limit=1_000_000, now=7_000)
    res = s.cycle(now=7_001)
    if stretch:
        assert [r.workload for r in res.reservations] == [gang]
        assert late.state == PENDING and res.blockers[late.id].code == "reserved"
        assert "none are held" not in s.explain(gang.id, now=7_001)["reason"]
    else:
        assert res.reservations == [] and late.state == ADMITTED
