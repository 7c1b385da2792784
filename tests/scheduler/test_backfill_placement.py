"""Backfill around a reserved head, strict order, and placement onto nodes and GPU indices."""

import pytest
from sched_helpers import cluster, job

from scheduler import EngineConfig, Scheduler
from scheduler.model import ADMITTED, PENDING


def _one_queue(backfill, nodes=1, gpus=8):
    # Age order (no expansion factor), so that the oldest blocked workload is the head.
    s = Scheduler(config=EngineConfig(backfill=backfill, release_on_preempt=True, expansion_order=False))
    for i in range(nodes):
        s.put_node({"name": f"n{i}", "gpus": gpus, "cpu": 64, "memory": "256Gi"}, now=0)
    s.put_queue({"name": "all", "guaranteed": {"gpu": nodes * gpus}}, now=0)
    return s


def test_backfill_lets_short_declared_work_run_in_front_of_the_reserved_head():
    s = _one_queue("reserve")
    running = job(s, "all", gpus=4, time_limit=1000, now=0)
    s.cycle(now=0)
    head = job(s, "all", gpus=8, now=1)                        # must wait until t=1000
    short = job(s, "all", gpus=2, time_limit=500, now=2)       # ends before 1000: may run now
    long = job(s, "all", gpus=2, time_limit=5000, now=3)       # would delay the head
    unknown = job(s, "all", gpus=1, now=4)                     # declares nothing
    res = s.cycle(now=10)
    assert [w.id for w in res.admitted] == [short.id]
    assert res.reservations and res.reservations[0].workload is head
    assert res.reservations[0].shadow == 1000
    assert res.blockers[long.id].code == "reserved" and res.blockers[unknown.id].code == "reserved"
    assert head.id in res.blockers[long.id].text()
    assert running.state == ADMITTED and head.state == PENDING


@pytest.mark.parametrize("head_gpus, starts", [(4, {2: True}), (5, {2: False, 1: True})])
def test_only_what_the_head_still_lacks_at_its_start_is_held(head_gpus, starts):
    # n0: a 4-GPU job ending at t=1000 and a 2-GPU job ending at 5000; 2 GPUs free. The head
    # starts at 1000 with the 4 that end then plus what it still needs of the 2 free now
    # (none for 4 GPUs, one for 5): the rest of the free GPUs may go to long work at once
    # (EASY's "extra" capacity) without delaying the head.
    s = _one_queue("reserve")
    ending = job(s, "all", gpus=4, time_limit=1000, now=0)
    job(s, "all", gpus=2, time_limit=5000, now=0)
    s.cycle(now=0)
    head = job(s, "all", gpus=head_gpus, now=1)
    long = {g: job(s, "all", gpus=g, time_limit=50_000, now=2 + g) for g in sorted(starts, reverse=True)}
    res = s.cycle(now=10)
    assert res.reservations[0].workload is head and res.reservations[0].shadow == 1000
    assert res.reservations[0].nodes == {"n0": (head_gpus - 4, 0, 0)}
    for g, started in starts.items():
        assert (long[g].state == ADMITTED) is started, g
        if not started:
            assert res.blockers[long[g].id].code == "reserved"
    s.mark_finished(ending.id, now=1000)
    s.cycle(now=1000)
    assert head.state == ADMITTED


def test_a_gang_holds_only_what_it_still_lacks_at_its_start():
    # The two 4-GPU jobs end at t=1000 and the 2 x 4 head starts on what they free; the 2 GPUs
    # free now are not needed then, and long work may use them.
    s = _one_queue("reserve", nodes=2)
    ending = [job(s, "all", gpus=4, time_limit=1000, now=0) for _ in range(2)]
    job(s, "all", gpus=2, time_limit=5000, now=0)
    job(s, "all", gpus=4, time_limit=5000, now=0)
    s.cycle(now=0)
    assert sorted(len(n.free_gpus) for n in s.state.inventory.nodes.values()) == [0, 2]
    head = job(s, "all", gpus=4, workers=2, now=1)
    long = job(s, "all", gpus=2, time_limit=50_000, now=2)
    res = s.cycle(now=10)
    assert res.reservations[0].workload is head and res.reservations[0].shadow == 1000
    assert set(res.reservations[0].nodes.values()) == {(0, 0, 0)}
    assert long.state == ADMITTED
    for w in ending:
        s.mark_finished(w.id, now=1000)
    s.cycle(now=1000)
    assert head.state == ADMITTED


def test_work_that_may_use_reserved_capacity_goes_elsewhere_when_it_fits_there():
    # n0 frees first (t=1000), so the 8-GPU head reserves n0. A short job may start on the
    # reserved capacity (it ends before 1000), but best fit would put it in n0's 2 free GPUs
    # and keep n0 from ever being whole; it goes to n1, which has room and no reservation.
    s = _one_queue("reserve", nodes=2)
    job(s, "all", gpus=6, time_limit=1000, now=0)
    job(s, "all", gpus=4, time_limit=5000, now=0)
    s.cycle(now=0)
    head = job(s, "all", gpus=8, now=1)
    short = job(s, "all", gpus=2, time_limit=500, now=2)
    res = s.cycle(now=10)
    assert res.reservations[0].workload is head and set(res.reservations[0].nodes) == {"n0"}
    assert short.state == ADMITTED and short.placement[0].node == "n1"
    # The next fills n1; with no room elsewhere, the one after still starts on the reserved
    # node (it ends before the head's start) rather than wait.
    fills, last = (job(s, "all", gpus=2, time_limit=500, now=20 + i) for i in range(2))
    s.cycle(now=30)
    assert [w.placement[0].node for w in (fills, last)] == ["n1", "n0"]
    assert head.state == PENDING


def test_strict_order_blocks_everything_behind_a_waiting_head_and_skip_does_not():
    for mode, expect_small in (("none", False), ("skip", True)):
        s = _one_queue(mode)
        job(s, "all", gpus=6, now=0)
        s.cycle(now=0)
        head = job(s, "all", gpus=8, now=1)
        small = job(s, "all", gpus=1, now=2)
        res = s.cycle(now=3)
        assert (small.state == ADMITTED) is expect_small, mode
        if mode == "none":
            assert res.blockers[small.id].code == "strict_order" and head.id in res.blockers[small.id].text()


def test_best_fit_consolidates_and_gives_lowest_gpu_indices():
    s = cluster(nodes=3, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 24}}])
    first = job(s, "a", gpus=5)
    s.cycle(now=0)
    second = job(s, "a", gpus=3, now=1)     # fits exactly in the rest of first's node
    s.cycle(now=1)
    assert second.placement[0].node == first.placement[0].node
    assert first.placement[0].gpus == (0, 1, 2, 3, 4) and second.placement[0].gpus == (5, 6, 7)
    whole = job(s, "a", gpus=8, now=2)      # two untouched nodes remain for it
    s.cycle(now=2)
    assert whole.state == ADMITTED


def test_gpu_model_and_node_selector_are_respected():
    s = Scheduler(config=EngineConfig())
    s.put_node({"name": "old", "gpus": 8, "gpu_model": "v100", "cpu": 64, "memory": "256Gi",
                "labels": {"zone": "east"}}, now=0)
    s.put_node({"name": "new", "gpus": 8, "gpu_model": "a100", "cpu": 64, "memory": "256Gi",
                "labels": {"zone": "west"}}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 16}}, now=0)
    a100 = job(s, "a", gpus=2, gpu_model="a100")
    east = job(s, "a", gpus=2, node_selector={"zone": "east"})
    flav = s.submit({"user": "u", "queue": "a", "kind": "training", "resources": {"gpu:v100": 1}}, now=0)
    s.cycle(now=1)
    assert a100.placement[0].node == "new" and east.placement[0].node == "old"
    assert flav.placement[0].node == "old" and flav.request == {"gpu": 1, "gpu:v100": 1}
    assert s.state.tree.usage["a"]["gpu:a100"] == 2


@pytest.mark.parametrize("flag", ["draining", "healthy"])
def test_unhealthy_or_draining_nodes_take_nothing_new_but_keep_what_runs(flag):
    s = cluster(nodes=2, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 8}}])
    before = job(s, "a", gpus=4)
    s.cycle(now=0)
    node = before.placement[0].node
    s.set_node_flags(node, **{flag: flag == "draining" and True or False}, now=1)
    fits_only_there = [job(s, "a", gpus=4, now=2), job(s, "a", gpus=4, now=2)]
    res = s.cycle(now=3)
    assert before.state == ADMITTED
    assert len(res.admitted) == 1 and res.admitted[0].placement[0].node != node
    assert fits_only_there[1].state == PENDING
    assert s.state.inventory.capacity["gpu"] == 4     # the flagged node no longer counts
