"""Acting on a job array as one (scheduler/array_actions.py): each task the action applies to, in
one store transaction, with the same events as one by one; refusals of some tasks said beside
the others; all or nothing when the store fails."""

import pytest

from scheduler import Scheduler
from scheduler.errors import Conflict, Forbidden, NotFound, ValidationError
from scheduler.model import (ADMITTED, AWAITING_APPROVAL, CANCELLED, CANCELLING, FINISHED, HELD, PENDING, REJECTED)
from scheduler.store.sql import SqlStore

from sched_helpers import cluster, job

LAUNCHED = {"job": {"command": ["true"]}}       # run by a launcher: a running task is stopped, not ended


def test_cancel_ends_each_waiting_task_and_stops_each_running_one_leaving_ended_ones_alone():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-5%2", metadata=LAUNCHED)
    s.cycle(now=1)
    s.mark_running(tasks[0].id, now=2)
    s.mark_finished(tasks[1].id, now=3)
    s.hold(tasks[5].id, now=3, actor="ada")
    out = s.act_on_array(tasks[0].id, "cancel", now=4, actor="ada")
    assert [w.id for w in out.done] == [tasks[0].id, *[t.id for t in tasks[2:]]] and out.refused == {}
    assert [s.get(t.id).state for t in tasks] == [CANCELLING, FINISHED, CANCELLED, CANCELLED, CANCELLED, CANCELLED]
    assert s.get(tasks[2].id).reason == "cancelled by ada"
    cancelled = [e.workload_id for e in s.events() if e.kind in ("cancelled", "cancelling")]
    assert sorted(cancelled) == sorted(w.id for w in out.done)      # one audit event per task, as one by one
    s.cycle(now=5)
    assert not s.state.pending and not s.state.held
    with pytest.raises(Conflict, match="has no tasks still live and not being stopped already .1 live: 1 cancelling."):
        s.act_on_array(tasks[0].id, "cancel", now=6, actor="ada")      # the one stopping: nothing left to do


def test_states_narrow_it_to_the_tasks_a_row_stands_for():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-3%2", metadata=LAUNCHED)
    s.cycle(now=1)
    s.hold(tasks[3].id, now=1, actor="ada")
    out = s.act_on_array(tasks[0].id, "cancel", now=2, actor="ada", states=("pending",))   # the pending row
    assert [w.id for w in out.done] == [tasks[2].id]
    assert [s.get(t.id).state for t in tasks] == [ADMITTED, ADMITTED, CANCELLED, HELD]
    with pytest.raises(Conflict, match="has no tasks still live and not being stopped already among those "
                                       "pending or awaiting approval"):
        s.act_on_array(tasks[0].id, "cancel", now=3, states=("pending", "awaiting_approval"))


def test_hold_takes_the_waiting_tasks_and_release_gives_them_back():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-3%1")
    s.cycle(now=1)
    out = s.act_on_array(tasks[0].id, "hold", now=2, actor="ada", reason="wait for the data")
    assert [w.id for w in out.done] == [t.id for t in tasks[1:]]        # the running one is not holdable
    assert [s.get(t.id).state for t in tasks] == [ADMITTED, HELD, HELD, HELD]
    assert s.get(tasks[2].id).metadata["hold"]["reason"] == "wait for the data"
    with pytest.raises(Conflict, match=r"has no tasks waiting and not held already \(4 live: 1 admitted, 3 held\)"):
        s.act_on_array(tasks[0].id, "hold", now=3, actor="ada")
    out = s.act_on_array(tasks[0].id, "release", now=4, actor="ada")
    assert len(out.done) == 3 and [s.get(t.id).state for t in tasks[1:]] == [PENDING] * 3
    assert s.get(tasks[1].id).eligible_at == 4                          # its wait counts from the release


def test_an_admins_holds_are_refused_to_the_owner_beside_the_tasks_she_may_release():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-2", hold=True)               # held by ada at submission
    s.hold(tasks[0].id, now=1, actor="root", admin=True, reason="maintenance")   # an admin's hold over hers
    out = s.act_on_array(tasks[0].id, "release", now=2, actor="ada")
    assert [w.id for w in out.done] == [t.id for t in tasks[1:]]
    assert out.refused == {tasks[0].id: f"workload {tasks[0].id} is held by an admin (by admin root: maintenance); "
                                        "only an admin releases it"}
    assert s.get(tasks[0].id).state == HELD
    with pytest.raises(Forbidden, match="only an admin releases it"):    # nothing she may release: the refusal
        s.act_on_array(tasks[0].id, "release", now=3, actor="ada")
    assert len(s.act_on_array(tasks[0].id, "release", now=4, actor="root", admin=True).done) == 1


def test_approve_and_reject_decide_each_task_awaiting_approval():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 2}}])
    big = job(s, gpus=4, now=0, array="0-2")
    other = job(s, gpus=4, now=0, array="0-1")
    assert {s.get(t.id).state for t in big + other} == {AWAITING_APPROVAL}
    assert len(s.act_on_array(big[0].id, "approve", now=1, actor="root", admin=True).done) == 3
    assert [s.get(t.id).state for t in big] == [PENDING] * 3
    s.act_on_array(other[0].id, "reject", now=2, actor="root", admin=True, reason="too big for now")
    assert [(s.get(t.id).state, s.get(t.id).reason) for t in other] == [(REJECTED, "too big for now")] * 2
    assert s.approvals() == []


def test_unknown_arrays_actions_and_reasons_are_refused_changing_nothing():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-1")
    lone = job(s, gpus=1, now=0)
    with pytest.raises(NotFound, match="no job array 'w9999999'"):
        s.act_on_array("w9999999", "cancel", now=1)
    with pytest.raises(NotFound):
        s.act_on_array(lone.id, "cancel", now=1)                        # one workload is no array
    with pytest.raises(ValidationError, match="action must be one of cancel, hold, release, approve, reject"):
        s.act_on_array(tasks[0].id, "stop", now=1)
    with pytest.raises(ValidationError, match="reason"):
        s.act_on_array(tasks[0].id, "hold", now=1, reason="x" * 501)
    with pytest.raises(Conflict, match="has no tasks awaiting approval"):
        s.act_on_array(tasks[0].id, "approve", now=1, admin=True)
    assert [s.get(t.id).state for t in tasks] == [PENDING, PENDING]


class Counting(SqlStore):
    """A real store that counts its outermost transactions and fails writing the ``fail_at``-th event
    (after the workloads' rows were written in the same transaction)."""
    commits, events, fail_at = 0, 0, 0

    def transaction(self):
        if self._conn.get() is None:
            self.commits += 1
        return super().transaction()

    def add_events(self, events):
        self.events += len(events)
        if self.fail_at and self.events >= self.fail_at:
            raise OSError("disk full (injected)")
        return super().add_events(events)


def setup(url):
    s = Scheduler(store=Counting(url))
    s.put_node({"name": "n0", "gpus": 8, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}}, now=0)
    return s, s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "array": "0-199"}, now=0)


def test_a_whole_array_is_one_transaction_and_durable(store_url):
    s, tasks = setup(store_url)
    before = s.store.commits
    assert len(s.act_on_array(tasks[0].id, "hold", now=1, actor="ada").done) == 200
    assert s.store.commits == before + 1
    again = Scheduler(store=SqlStore(store_url))
    assert {again.get(t.id).state for t in tasks} == {HELD}
    assert sum(e.kind == "held" for e in again.events()) == 200


def test_a_store_failure_part_way_leaves_every_task_as_it_was(store_url):
    s, tasks = setup(store_url)
    s.store.events, s.store.fail_at = 0, 150
    with pytest.raises(OSError, match="disk full"):
        s.act_on_array(tasks[0].id, "cancel", now=1, actor="ada")
    assert {s.get(t.id).state for t in tasks} == {PENDING}              # memory: rebuilt from the store
    assert len(s.state.pending) == 200
    again = Scheduler(store=SqlStore(store_url))
    assert {again.get(t.id).state for t in tasks} == {PENDING}
    assert not [e for e in again.events() if e.kind == "cancelled"]


def test_only_the_thread_acting_on_the_array_is_gathered(tmp_path):
    """The service writes submissions on a thread of its own through the same store attribute:
    what that thread writes goes to the store at once, never into the array's batch."""
    import threading

    from scheduler.array_actions import Gathered
    from scheduler.model import Event

    store = SqlStore(f"sqlite:///{tmp_path / 'db.sqlite'}")
    gathered = Gathered(store)

    def writer():
        with store.transaction():
            gathered.add_events([Event(1.0, "submitted", "w0000001", "", {})])
            gathered.add_event(Event(1.0, "held", "w0000001", "", {}))

    t = threading.Thread(target=writer)
    t.start()
    t.join()
    assert [e.kind for e in store.get_events()] == ["submitted", "held"]
    gathered.add_event(Event(2.0, "cancelled", "w0000002", "", {}))     # this thread's: kept for the flush
    assert [e.kind for e in store.get_events()] == ["submitted", "held"]
    with store.transaction():
        gathered.flush()
    assert [e.kind for e in store.get_events()] == ["submitted", "held", "cancelled"]
