"""Holding waiting work back and letting it go (scheduler/holds.py): who may release what, the
wait counted from the release, holds together with dependencies, approval and restarts."""

import pytest

from scheduler import EngineConfig, Scheduler
from scheduler.errors import Conflict, Forbidden, ValidationError
from scheduler.model import ADMITTED, AWAITING_APPROVAL, CANCELLED, HELD, PENDING
from scheduler.store.sql import SqlStore

from sched_helpers import cluster, job


def test_held_work_does_not_start_until_released_and_waits_from_then():
    s = cluster(nodes=1, gpus=8)
    w = job(s, gpus=8, now=0, time_limit=3600)
    s.hold(w.id, now=1, actor="ada", reason="data not ready")
    assert (w.state, w.id in s.state.pending, w.id in s.state.held) == (HELD, False, True)
    assert s.explain(w.id, now=2)["reason"] == (f"held by ada: data not ready; it starts only once released "
                                                f"(computehub release {w.id})")
    s.cycle(now=2)
    rival = job(s, gpus=8, now=500, time_limit=3600)       # in line from 500
    s.cycle(now=501)
    assert s.get(rival.id).state == ADMITTED and s.get(w.id).state == HELD     # the free GPUs went past it
    other = job(s, gpus=8, now=700, time_limit=3600)
    s.release(w.id, now=1000, actor="ada")
    assert (w.state, w.eligible_at, w.reason) == (PENDING, 1000, "")
    s.cycle(now=1001)        # both wait for the rival's GPUs: other has waited since 700, w since 1000
    assert [x.id for x in s.engine.order()] == [other.id, w.id]
    kinds = [(e.kind, e.reason) for e in s.events(workload_id=w.id)]
    assert ("held", "data not ready") in kinds and ("hold_released", "") in kinds


def test_only_waiting_work_is_held_and_only_once_by_each():
    s = cluster(nodes=1, gpus=8)
    running = job(s, gpus=1, now=0)
    s.cycle(now=1)
    with pytest.raises(Conflict, match="is admitted; only waiting work"):
        s.hold(running.id, now=2)
    w = job(s, gpus=1, now=2)
    with pytest.raises(Conflict, match="is not held by anyone"):
        s.release(w.id, now=3)
    s.hold(w.id, now=3, actor="ada")
    with pytest.raises(Conflict, match="held already \\(by ada\\)"):
        s.hold(w.id, now=4, actor="ada")
    s.hold(w.id, now=4, actor="root", admin=True, reason="audit")        # an admin's hold replaces hers
    with pytest.raises(Forbidden, match="held by an admin \\(by admin root: audit\\); only an admin"):
        s.release(w.id, now=5, actor="ada")
    with pytest.raises(Conflict, match="held already \\(by admin root: audit\\)"):
        s.hold(w.id, now=5, actor="boss", admin=True)
    assert s.release(w.id, now=6, actor="root", admin=True).state == PENDING
    assert s.cancel(s.hold(w.id, now=7).id, now=8).state == CANCELLED      # held work can be cancelled
    spawn = job(s, kind="notebook", gpus=1, now=9)       # pending: no cycle since
    with pytest.raises(Conflict, match="a notebook's spawn cannot be held"):
        s.hold(spawn.id, now=10)
    with pytest.raises(ValidationError, match="a notebook's spawn cannot be held"):
        job(s, kind="notebook", now=10, hold=True)


def test_a_hold_and_dependencies_together():
    s = cluster(nodes=1, gpus=8)
    first = job(s, gpus=1, now=0)
    s.cycle(now=1)
    then = job(s, gpus=1, now=2, after=[first.id], hold=True)
    assert then.reason == (f"held by ada: held at submission; it starts only once released (computehub release "
                           f"{then.id}); then it runs after {first.id} finishes (it is admitted)")
    s.mark_finished(first.id, now=3)
    s.cycle(now=4)
    assert s.get(then.id).state == HELD                 # its dependency ended, but the hold keeps it back
    s.release(then.id, now=5)
    assert s.get(then.id).state == HELD                 # the next cycle lets it in
    s.cycle(now=6)
    assert s.get(then.id).state == ADMITTED and s.get(then.id).eligible_at == 6
    # A hold does not keep alive work that can never run: cancelled all the same.
    a = job(s, gpus=1, now=7)
    s.cycle(now=8)
    b = job(s, gpus=1, now=9, after=[a.id], hold=True)
    s.mark_finished(a.id, now=10, exit_code=1)
    s.cycle(now=11)
    assert s.get(b.id).state == CANCELLED


def test_submitted_held_through_approval_and_a_restart(store_url):
    url = store_url           # SQLite and PostgreSQL
    s = Scheduler(store=SqlStore(url), config=EngineConfig())
    s.put_node({"name": "n0", "gpus": 8}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 4}}, now=0)
    spec = {"user": "ada", "queue": "a", "kind": "training", "hold": True}
    big = s.submit({**spec, "resources": {"gpu": 6}}, now=1)
    small = s.submit({**spec, "resources": {"gpu": 1}}, now=1)
    assert (big.state, small.state) == (AWAITING_APPROVAL, HELD)
    s.decide(big.id, True, now=2)
    assert s.get(big.id).state == HELD
    with pytest.raises(ValidationError, match="hold must be true or false"):
        s.submit({**spec, "resources": {"gpu": 1}, "hold": "yes"}, now=2)
    with pytest.raises(ValidationError, match="'hold' are set by ComputeHub"):
        s.submit({**spec, "resources": {"gpu": 1}, "hold": False, "metadata": {"hold": {"admin": True}}}, now=2)
    s.store.close()

    s = Scheduler(store=SqlStore(url), config=EngineConfig())
    assert set(s.state.held) == {big.id, small.id}
    s.cycle(now=3)
    assert s.get(small.id).state == HELD
    s.release(small.id, now=4)
    s.cycle(now=5)
    assert s.get(small.id).state == ADMITTED and s.get(big.id).state == HELD
    s.store.close()


def test_work_with_a_begin_time_waits_held_until_then_and_joins_the_line_by_itself():
    s = cluster(nodes=1, gpus=8)
    night = job(s, gpus=8, now=0, time_limit=3600, name="night", begin=7200)
    assert night.state == HELD and night.metadata["hold"]["until"] == 7200
    said = (f"held until 1970-01-01 02:00:00 UTC by ada: its begin time; it joins the line then, or once released "
            f"(computehub release {night.id})")
    assert night.reason == said
    e = s.explain(night.id, now=600)
    assert (e["reason"], e["eta"], e["eta_seconds"], e["eta_earliest"]) == (said, 7200, 6600, True)
    day = job(s, gpus=8, now=100, time_limit=3600)
    later = job(s, gpus=1, now=100, begin=9000)
    s.hold(job(s, gpus=1, now=100).id, now=100, actor="ada")                        # held with no end: no time
    assert s.next_begin() == 7200                                                   # the service wakes then
    s.cycle(now=101)
    assert (s.get(day.id).state, s.get(night.id).state) == (ADMITTED, HELD)        # the GPUs went past it
    s.mark_finished(day.id, now=3000)
    s.cycle(now=3001)
    assert s.get(night.id).state == HELD                                            # free GPUs: not yet
    s.cycle(now=7205)                                                               # the first cycle from then
    assert s.get(night.id).state == ADMITTED and s.get(night.id).eligible_at == 7205
    assert s.next_begin() == 9000
    s.cancel(later.id, now=7300)
    assert s.next_begin() is None
    assert [e.kind for e in s.events(workload_id=night.id)][-2:] == ["hold_released", "admitted"]
    # Its user may let it go sooner; a begin time already past is no hold at all.
    early = job(s, gpus=1, now=8000, begin=20000)
    s.release(early.id, now=8001, actor="ada")
    assert s.get(early.id).state == PENDING
    assert job(s, gpus=1, now=8002, begin=8000).state == PENDING


def test_a_begin_time_with_dependencies_approval_and_a_restart(store_url):
    s = Scheduler(store=SqlStore(store_url), config=EngineConfig())
    s.put_node({"name": "n0", "gpus": 8}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 4}}, now=0)
    spec = {"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}}
    first = s.submit(spec, now=1)
    then = s.submit({**spec, "after": [first.id], "begin": 100}, now=1)
    big = s.submit({**spec, "resources": {"gpu": 6}, "begin": 100}, now=1)
    assert (then.state, big.state) == (HELD, AWAITING_APPROVAL)
    assert then.reason.endswith(f"(computehub release {then.id}); then it runs after {first.id} finishes "
                                "(it is pending)")
    last = s.submit({**spec, "after": [then.id]}, now=1)       # no estimate behind a begin time
    assert s.explain(last.id, now=1)["eta_reason"] == (f"{then.id}, which it waits on, is held until its begin "
                                                        "time: no start estimate until it is released")
    s.decide(big.id, True, now=2)
    assert s.get(big.id).state == HELD                  # approved, but not before its begin time
    s.store.close()

    s = Scheduler(store=SqlStore(store_url), config=EngineConfig())      # a restart keeps the begin times
    s.cycle(now=3)
    assert (s.get(then.id).state, s.get(big.id).state) == (HELD, HELD)
    s.cycle(now=101)
    assert s.get(big.id).state == ADMITTED
    assert s.get(then.id).state == HELD and "hold" not in s.get(then.id).metadata    # now its dependency alone
    s.mark_finished(first.id, now=102)
    s.cycle(now=103)
    assert s.get(then.id).state == ADMITTED
    s.store.close()


@pytest.mark.parametrize("fields, says", [
    ({"begin": "tonight"}, "begin must be a time (seconds since 1970, UTC), not 'tonight'"),
    ({"begin": True}, "begin must be a time"),
    ({"begin": float("nan")}, "begin must be a time"),
    ({"begin": 400 * 86400}, "begin is 400 days ahead: at most 366"),
    ({"begin": 100, "hold": True}, "hold and begin together: give one"),
    ({"begin": 100, "kind": "notebook"}, "a notebook's spawn cannot wait for a begin time"),
])
def test_a_bad_begin_time_is_refused_saying_what_is_wrong(fields, says):
    s = cluster(nodes=1, gpus=8)
    with pytest.raises(ValidationError, match=says.replace("(", r"\(").replace(")", r"\)")):
        s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}, **fields}, now=1)
    assert not s.state.held and not s.state.pending


def test_a_hold_until_a_time_ends_by_itself_and_its_time_can_be_changed():
    s = cluster(nodes=1, gpus=8)
    w = job(s, gpus=1, now=0)
    s.hold(w.id, now=10, actor="ada", reason="after the data lands", until=3600)
    assert w.reason == (f"held until 1970-01-01 01:00:00 UTC by ada: after the data lands; it joins the line then, "
                        f"or once released (computehub release {w.id})")
    s.hold(w.id, now=20, actor="ada", until=7200)            # later: its own timed hold, changed
    assert w.metadata["hold"]["until"] == 7200
    with pytest.raises(Conflict, match="is held already"):
        s.hold(w.id, now=30, actor="ada")                    # a hold with no end does not replace one
    s.cycle(now=3700)
    assert s.get(w.id).state == HELD
    s.cycle(now=7200)
    assert s.get(w.id).state == ADMITTED
    # An admin's hold until the maintenance ends: its owner cannot change or release it; it ends by itself.
    v = job(s, gpus=1, now=7300)
    s.hold(v.id, now=7301, actor="root", admin=True, reason="maintenance", until=9000)
    with pytest.raises(Conflict, match="is held already"):
        s.hold(v.id, now=7302, actor="ada", until=7400)
    with pytest.raises(Forbidden):
        s.release(v.id, now=7303, actor="ada")
    s.cycle(now=9001)
    assert s.get(v.id).state == ADMITTED
    with pytest.raises(ValidationError, match=r"until \(1970-01-01 00:00:05 UTC\) has passed"):
        s.hold(job(s, gpus=1, now=9100).id, now=9101, actor="ada", until=5)


def test_an_arrays_waiting_tasks_are_held_until_a_time_in_one_go():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-3", hold=True)
    out = s.act_on_array(tasks[0].id, "hold", now=5, actor="ada", until=600)      # held by hand: now timed
    assert len(out.done) == 4 and {t.metadata["hold"]["until"] for t in tasks} == {600}
    with pytest.raises(ValidationError, match="a release takes no until"):
        s.act_on_array(tasks[0].id, "release", now=6, actor="ada", until=700)
    s.cycle(now=601)
    assert {s.get(t.id).state for t in tasks} == {ADMITTED}
