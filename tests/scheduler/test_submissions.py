"""Submissions in three steps (prepare, write, apply), as the service runs them with the
database write on a writer thread; on a real SQLite file."""

import threading

import pytest

from scheduler import EngineConfig, Scheduler
from scheduler.errors import SchedulerError
from scheduler.model import ADMITTED, AWAITING_APPROVAL, PENDING
from scheduler.store.sql import SqlStore


@pytest.fixture
def sched(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path / 'ch.sqlite'}")
    s = Scheduler(store=store, config=EngineConfig())
    s.put_node({"name": "n0", "gpus": 8}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 4}}, now=0)
    yield s
    store.close()


def spec(gpus=1, **kw):
    return {"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": gpus}, **kw}


def test_each_step_does_only_its_part(sched):
    batch = sched.prepare_submissions([spec(), spec(queue="nope"), spec(gpus=6)], now=10)
    ok, bad, big = batch.results
    assert isinstance(bad, SchedulerError) and "nope" in str(bad)
    assert (ok.state, big.state) == (PENDING, AWAITING_APPROVAL) and ok.seq + 1 == big.seq
    assert sched.store.get_workloads() == [] and ok.id not in sched.state.workloads

    # Written from another thread, as the service does: durable, memory still untouched.
    t = threading.Thread(target=sched.write_submissions, args=(batch,))
    t.start()
    t.join()
    assert [w.id for w in sched.store.get_workloads()] == [ok.id, big.id]
    kinds = [(e.kind, e.workload_id) for e in sched.store.get_events(kinds=("submitted", "approval_requested"))]
    assert kinds == [("submitted", ok.id), ("submitted", big.id), ("approval_requested", big.id)]
    assert ok.id not in sched.state.workloads

    sched.apply_submissions(batch)
    assert sched.state.pending[ok.id] is ok
    assert sched.cycle(now=11) and sched.get(ok.id).state == ADMITTED
    assert sched.submit(spec(), now=12).seq == big.seq + 1       # ids go on after the batch


def test_a_failed_write_loses_nothing_and_changes_nothing(sched, monkeypatch):
    first = sched.submit(spec(), now=1)
    batch = sched.prepare_submissions([spec(), spec()], now=2)

    def broken(events):
        raise OSError("disk full")

    monkeypatch.setattr(sched.store, "add_events", broken)
    with pytest.raises(OSError):
        sched.write_submissions(batch)
    monkeypatch.undo()
    assert [w.id for w in sched.store.get_workloads()] == [first.id]     # rolled back as a whole
    assert list(sched.state.pending) == [first.id]
    again = sched.submit_many([spec(), spec()], now=3)                  # the next batch goes through
    assert [w.state for w in again] == [PENDING, PENDING]
    assert len(sched.store.get_workloads()) == 3


def test_a_batch_being_written_keeps_its_queue_and_class(sched):
    from scheduler.errors import Conflict

    sched.put_queue({"name": "b"}, now=0)
    sched.put_class({"name": "rare", "rank": 5}, now=0)
    batch = sched.prepare_submissions([spec(queue="b", priority="rare")], now=1)
    with pytest.raises(Conflict, match="pending or running"):
        sched.delete_queue("b", now=1)
    with pytest.raises(Conflict, match="pending or running"):
        sched.delete_class("rare", now=1)
    sched.drop_submissions(batch)                       # its write failed: nothing holds them now
    sched.delete_queue("b", now=2)
    sched.delete_class("rare", now=2)


def test_a_user_may_have_only_so_many_workloads_in_line(sched):
    """max_waiting_per_user: counted over what is pending and what a batch in flight adds (in
    the same batch too); running work and work awaiting approval do not count; another user is
    not held back; the count follows work that starts, is cancelled or is requeued."""
    from scheduler.errors import TooManyWaiting
    sched.max_waiting_per_user = 3
    running = sched.submit_many([spec(4), spec(4)], now=1)     # run: they take the whole node
    assert sched.cycle(now=2) and {sched.get(w.id).state for w in running} == {ADMITTED}
    waiting = sched.submit_many([spec(), spec(), spec(6), spec()], now=3)    # the third awaits approval
    assert [getattr(w, "state", None) for w in waiting[:3]] == [PENDING, PENDING, AWAITING_APPROVAL]
    assert waiting[3].state == PENDING
    in_flight = sched.prepare_submissions([spec(), spec(user="bo")], now=4)
    refused, bo = in_flight.results
    assert isinstance(refused, TooManyWaiting) and refused.status == 429 and refused.code == "too_many_waiting"
    assert str(refused) == ("ada already has 3 workloads waiting in line (pending), the most one user may have "
                            "here (the service's max_waiting_per_user): cancel some, or submit more once "
                            "some have started")
    assert bo.state == PENDING
    sched.write_submissions(in_flight)
    sched.apply_submissions(in_flight)
    sched.cancel(waiting[0].id, now=5)
    assert sched.submit(spec(), now=6).state == PENDING         # room again after a cancel
    with pytest.raises(TooManyWaiting):
        sched.submit(spec(), now=7)
    sched.max_waiting_per_user = 0
    assert sched.submit(spec(), now=8).state == PENDING          # 0: no cap
    assert sched.state.pending.by_user == {"ada": 4, "bo": 1}
