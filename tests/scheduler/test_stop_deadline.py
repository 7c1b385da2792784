"""``Scheduler.flag_unstopped`` (the service's ``stop_deadline``): a victim that no launcher
reports stopped stops being "about to be free" at the deadline. What it holds stays held (no
GPU is used twice), and the work that waited on it is placed or makes room elsewhere; a late
report of its stop ends it as any stop does. The scheduler on its own clock (``now=``);
tests/hub_ext/test_stop_deadline_hub.py has the service."""

from __future__ import annotations

from sched_helpers import cluster, job

from scheduler import EngineConfig, Scheduler
from scheduler.invariants import violations
from scheduler.model import ADMITTED, PENDING, PREEMPTING, STOP_OVERDUE, STOPPING_SINCE
from scheduler.store.sql import SqlStore

DEADLINE = 900.0


def two_nodes(store=None):
    """Queues a and b, 4 GPUs guaranteed each on two 4-GPU nodes; b borrows both nodes."""
    s = cluster(nodes=2, gpus=4, release=False, queues=[{"name": "a", "guaranteed": {"gpu": 4}},
                                                          {"name": "b", "guaranteed": {"gpu": 4}}])
    if store is not None:
        s = Scheduler(store, config=EngineConfig(release_on_preempt=False))
        s.put_node({"name": "n0", "gpus": 4}, now=0)
        s.put_node({"name": "n1", "gpus": 4}, now=0)
        s.put_queue({"name": "a", "guaranteed": {"gpu": 4}}, now=0)
        s.put_queue({"name": "b", "guaranteed": {"gpu": 4}}, now=0)
    b1 = job(s, "b", user="bob", gpus=4, now=0)
    b2 = job(s, "b", user="bob", gpus=4, now=1)
    s.cycle(now=1)
    s.mark_running(b1.id, now=2)
    s.mark_running(b2.id, now=2)
    return s, b1, b2


def cycle(s, now, deadline=DEADLINE):
    """As the service runs a cycle: victims past the deadline flagged first."""
    flagged = s.flag_unstopped(deadline, now=now)
    return flagged, s.cycle(now=now)


def gpus_of(w):
    return {(a.node, g) for a in w.placement for g in a.gpus}


def test_a_victim_never_reported_stopped_no_longer_holds_up_the_work_that_waits_for_it():
    s, b1, b2 = two_nodes()
    a1 = job(s, "a", gpus=4, now=700)
    _, res = cycle(s, 700)
    assert [v.id for v, _ in res.preempted] == [b2.id] and b2.state == PREEMPTING
    assert b2.metadata[STOPPING_SINCE] == 700
    assert res.blockers[a1.id].code == "waiting_preemption"
    # Its launcher never reports it stopped: up to the deadline a1 waits for it, nothing more.
    flagged, res = cycle(s, 700 + DEADLINE - 1)
    assert flagged == [] and res.preempted == [] and a1.state == PENDING
    flagged, res = cycle(s, 700 + DEADLINE)
    assert [w.id for w in flagged] == [b2.id] and b2.metadata[STOP_OVERDUE] == 700 + DEADLINE
    # b2 still holds its GPUs, so b still borrows 4: a reclaims them from b1 instead.
    assert [v.id for v, _ in res.preempted] == [b1.id]
    assert b2.state == PREEMPTING and gpus_of(b2) and not violations(s.state)
    ev = s.events(workload_id=b2.id, kinds=("stop_overdue",))
    assert len(ev) == 1 and "no launcher has reported it stopped" in ev[0].reason
    assert f"preempted by {a1.id}" in ev[0].reason and "15 min ago" in ev[0].reason
    assert cycle(s, 700 + DEADLINE + 5)[0] == []                # flagged once
    s.mark_stopped(b1.id, now=700 + DEADLINE + 10)
    _, res = cycle(s, 700 + DEADLINE + 11)
    assert [w.id for w in res.admitted] == [a1.id] and a1.state == ADMITTED
    assert not gpus_of(a1) & gpus_of(b2) and not violations(s.state)      # no GPU used twice
    # A late report that b2 stopped ends it as any stop does, and a later preemption counts afresh.
    s.mark_stopped(b2.id, now=700 + DEADLINE + 20)
    assert b2.state == PENDING and STOP_OVERDUE not in b2.metadata and STOPPING_SINCE not in b2.metadata
    assert not violations(s.state)


def test_without_the_deadline_the_waiting_work_waits_on_the_victim():
    s, b1, b2 = two_nodes()
    a1 = job(s, "a", gpus=4, now=700)
    cycle(s, 700, deadline=0)
    flagged, res = cycle(s, 700 + 10 * DEADLINE, deadline=0)
    assert flagged == [] and res.preempted == [] and a1.state == PENDING
    assert res.blockers[a1.id].code == "waiting_preemption" and b1.state != PREEMPTING


def test_overdue_is_durable_and_a_restarted_scheduler_does_not_count_it_as_leaving(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    s, b1, b2 = two_nodes(SqlStore(url))
    a1 = job(s, "a", gpus=4, now=700)
    cycle(s, 700)
    cycle(s, 700 + DEADLINE)
    again = Scheduler(SqlStore(url), config=EngineConfig(release_on_preempt=False))
    w = again.get(b2.id)
    assert w.state == PREEMPTING and w.metadata[STOP_OVERDUE] == 700 + DEADLINE
    # What b2 holds is held, not leaving, after a restart too: nothing is nominated onto it.
    res = again.cycle(now=700 + DEADLINE + 1)
    assert res.preempted == [] and again.get(a1.id).state == PENDING
    assert again.get(b1.id).state == PREEMPTING and not violations(again.state)


def test_work_stopping_since_before_the_service_recorded_when_counts_from_now():
    s, b1, b2 = two_nodes()
    job(s, "a", gpus=4, now=700)
    cycle(s, 700)
    del b2.metadata[STOPPING_SINCE]            # as a row written by a version that did not record it
    flagged, _ = cycle(s, 5000)
    assert flagged == [] and b2.metadata[STOPPING_SINCE] == 5000
    assert [w.id for w in cycle(s, 5000 + DEADLINE)[0]] == [b2.id]


def test_removing_the_node_of_overdue_work_ends_it_and_frees_nothing_twice():
    s, b1, b2 = two_nodes()
    a1 = job(s, "a", gpus=4, now=700)
    cycle(s, 700)
    cycle(s, 700 + DEADLINE)
    node = b2.placement[0].node
    lost = s.remove_node(node, now=700 + DEADLINE + 1)
    assert [w.id for w in lost] == [b2.id] and b2.state == PENDING
    assert STOP_OVERDUE not in b2.metadata and not violations(s.state)
    assert [e.kind for e in s.events(workload_id=b2.id)][-2:] == ["node_lost", "requeued"]
    s.mark_stopped(b1.id, now=700 + DEADLINE + 2)
    _, res = cycle(s, 700 + DEADLINE + 3)
    assert [w.id for w in res.admitted] == [a1.id] and a1.placement[0].node != node
