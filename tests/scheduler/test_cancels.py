"""Cancelling (scheduler/cancels.py): work a launcher runs keeps its GPUs, ``cancelling``, until
its launcher reports it stopped, so nothing starts on GPUs its processes may still use; all
else ends at once. The scheduler on its own clock; the launchers' side is in
tests/spawner/test_launcher_cancel.py and test_launch_kube.py."""

from __future__ import annotations

import pytest
from sched_helpers import cluster, job

from scheduler import EngineConfig, Scheduler
from scheduler.errors import Conflict
from scheduler.invariants import violations
from scheduler.model import ADMITTED, CANCELLED, CANCELLING, PENDING, PREEMPTING, STOP_OVERDUE
from scheduler.store.sql import SqlStore

JOB = {"job": {"command": ["python", "train.py"]}}


def one_node(store=None):
    s = Scheduler(store, config=EngineConfig(release_on_preempt=False)) if store else \
        cluster(nodes=1, gpus=4, release=False, queues=[{"name": "a", "guaranteed": {"gpu": 2}},
                                                        {"name": "b", "guaranteed": {"gpu": 2}}])
    if store is not None:
        s.put_node({"name": "n0", "gpus": 4}, now=0)
        s.put_queue({"name": "a", "guaranteed": {"gpu": 2}}, now=0)
        s.put_queue({"name": "b", "guaranteed": {"gpu": 2}}, now=0)
    return s


def kinds(s, wid):
    return [e.kind for e in s.events(workload_id=wid)]


def running(s, queue="a", gpus=4, now=0):
    """A launcher-run job admitted at ``now`` and running a second later."""
    w = job(s, queue, gpus=gpus, metadata=JOB, now=now)
    s.cycle(now=now)
    s.mark_running(w.id, now=now + 1)
    return w


def test_a_launcher_run_job_keeps_its_gpus_until_it_has_stopped():
    s = one_node()
    w = job(s, "a", gpus=4, metadata=JOB, now=0)
    s.cycle(now=0)
    s.mark_running(w.id, now=1)
    nxt = job(s, "a", gpus=4, metadata=JOB, now=2)
    assert s.cancel(w.id, now=10, reason="cancelled by ada").state == CANCELLING
    assert "its GPUs return once its launcher has stopped it" in w.reason
    res = s.cycle(now=11)
    # The next job is placed on the GPUs it leaves, but starts only once they are free.
    assert res.admitted == [] and nxt.state == PENDING and w.state == CANCELLING
    assert res.blockers[nxt.id].code == "waiting_preemption" and not violations(s.state)
    assert s.cancel(w.id, now=12) is w and kinds(s, w.id).count("cancelling") == 1     # asked twice
    s.mark_stopped(w.id, now=20)
    assert w.state == CANCELLED and w.ended_at == 20 and w.reason == "cancelled by ada; stopped"
    assert kinds(s, w.id)[-2:] == ["cancelling", "cancelled"]
    # Its GPU-hours count until it stopped, not until it was cancelled.
    assert s.usage(0, 100, by="workload")[0]["gpu_hours"] == pytest.approx(4 * 20 / 3600)
    res = s.cycle(now=21)
    assert [x.id for x in res.admitted] == [nxt.id] and not violations(s.state)
    with pytest.raises(Conflict):
        s.cancel(w.id, now=22)


def test_work_no_launcher_runs_ends_at_once():
    s = one_node()
    bare = job(s, "a", gpus=2, now=0)                       # a runner of one's own: no metadata.job
    nb = job(s, "b", gpus=2, kind="notebook", metadata=JOB, now=0)
    pend = job(s, "a", gpus=4, metadata=JOB, now=0)
    s.cycle(now=0)
    for w in (bare, nb, pend):
        assert s.cancel(w.id, now=5).state == CANCELLED
    assert "cancelling" not in kinds(s, bare.id) and not s.state.holding


def test_a_job_ending_on_its_own_while_being_stopped_ends_cancelled():
    s = one_node()
    w = running(s, gpus=2)
    s.cancel(w.id, now=5)
    s.mark_finished(w.id, now=6, exit_code=0)
    assert w.state == CANCELLED and w.reason == "cancelled by user; it ended (exit code 0)"


def test_cancelling_a_victim_ends_it_instead_of_requeueing_it():
    s = one_node()
    b = [job(s, "b", user="bob", gpus=2, metadata=JOB, now=0) for _ in range(2)]
    s.cycle(now=0)
    for w in b:
        s.mark_running(w.id, now=1)
    a = job(s, "a", gpus=2, metadata=JOB, now=700)
    res = s.cycle(now=700)
    victim = res.preempted[0][0]
    assert victim.state == PREEMPTING
    s.cancel(victim.id, now=701)
    assert victim.state == CANCELLING
    assert s.cycle(now=702).preempted == [] and a.state == PENDING        # no second victim
    s.mark_stopped(victim.id, now=703)
    assert victim.state == CANCELLED and "requeued" not in kinds(s, victim.id)
    assert [x.id for x in s.cycle(now=704).admitted] == [a.id] and not violations(s.state)


def test_the_stop_deadline_bounds_a_cancel_nobody_confirms():
    s = one_node()
    w = running(s)
    s.cancel(w.id, now=10)
    assert s.flag_unstopped(900, now=909) == []
    assert s.flag_unstopped(900, now=910) == [w]
    ev = s.events(workload_id=w.id, kinds=("stop_overdue",))
    assert "(cancelled)" in ev[0].reason and STOP_OVERDUE in w.metadata
    nxt = job(s, "a", gpus=4, metadata=JOB, now=911)
    res = s.cycle(now=911)
    assert res.admitted == [] and nxt.state == PENDING and res.blockers[nxt.id].code != "waiting_preemption"


def test_cancelling_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    s = one_node(SqlStore(url))
    w = job(s, "a", gpus=4, metadata=JOB, now=0)
    s.cycle(now=0)
    s.mark_running(w.id, now=1)
    s.cancel(w.id, now=10)
    again = Scheduler(SqlStore(url), config=EngineConfig(release_on_preempt=False))
    assert again.get(w.id).state == CANCELLING and not violations(again.state)
    nxt = job(again, "a", gpus=4, metadata=JOB, now=11)
    assert again.cycle(now=11).admitted == []
    again.mark_stopped(w.id, now=12)
    assert again.store.get_workload(w.id).state == CANCELLED
    assert [x.id for x in again.cycle(now=13).admitted] == [nxt.id]
    assert again.get(nxt.id).state == ADMITTED
