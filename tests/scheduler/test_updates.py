"""Changing accepted work (scheduler/updates.py): what may change in which state, the place in
line kept or restarted, approval thresholds, who may give more time, and that a refused change
changes nothing, in memory or in the store."""

import pytest

from scheduler import Scheduler
from scheduler.errors import Conflict, Forbidden, NotFound, ValidationError
from scheduler.model import ADMITTED, AWAITING_APPROVAL, HELD, PENDING
from scheduler.store.sql import SqlStore

from scheduler.blockers import minutes

from sched_helpers import cluster, job


def _busy(s, now=0):
    """Every GPU of the 2 × 8 cluster taken, so that what is submitted next waits."""
    hogs = [job(s, "b", user="bob", gpus=8, now=now, time_limit=3600) for _ in range(2)]
    s.cycle(now=now)
    assert all(s.get(h.id).state == ADMITTED for h in hogs)
    return hogs


def test_waiting_work_shrinks_and_keeps_its_place_but_growing_waits_from_then():
    s = cluster()
    _busy(s)
    first = job(s, gpus=4, now=10, time_limit=7200, name="sweep")
    s.update(first.id, {"resources": {"gpu": 4, "memory": "8Gi"}}, now=15)        # more memory: waits from 15
    assert s.get(first.id).eligible_since == 15
    second = job(s, gpus=4, now=20, time_limit=7200)
    w = s.update(first.id, {"resources": {"gpu": 2, "memory": "4Gi"}, "name": "sweep-small"}, now=30, actor="ada")
    assert (w.request["gpu"], w.request["memory"], w.name) == (2, 4 * 2**30, "sweep-small")
    assert (w.state, w.eligible_since) == (PENDING, 15)       # smaller: its place kept
    s.cycle(now=35)
    assert [x.id for x in s.engine.order()] == [first.id, second.id]
    s.update(first.id, {"resources": {"gpu": 3}}, now=40, actor="ada")
    s.cycle(now=45)
    assert s.get(first.id).request == {"gpu": 3, "memory": 4 * 2**30}     # merged, memory kept
    assert s.get(first.id).eligible_since == 40         # more GPUs: it waits from now, behind second
    assert [x.id for x in s.engine.order()] == [second.id, first.id]
    ev = [e for e in s.events(workload_id=first.id) if e.kind == "updated"]
    assert [e.reason for e in ev] == ["request", "name, request", "request"]
    assert ev[1].data["before"] == {"name": "sweep", "request": {"gpu": 4, "memory": 8 * 2**30}}
    assert ev[1].data["after"] == {"name": "sweep-small", "request": {"gpu": 2, "memory": 4 * 2**30}}
    assert ev[1].data["actor"] == "ada" and "wait_restarted" not in ev[1].data
    assert ev[0].data["wait_restarted"] is ev[2].data["wait_restarted"] is True


def test_another_queue_or_class_is_another_line():
    s = cluster()
    _busy(s)
    w = job(s, gpus=1, now=10)
    s.update(w.id, {"queue": "b", "priority": "preemptible"}, now=50)
    w = s.get(w.id)
    assert (w.queue, w.priority, w.eligible_since) == ("b", "preemptible", 50)
    with pytest.raises(NotFound, match="unknown queue 'nowhere'"):
        s.update(w.id, {"queue": "nowhere"}, now=60)
    with pytest.raises(NotFound, match="unknown priority class 'vip'"):
        s.update(w.id, {"priority": "vip"}, now=60)


def test_a_refused_change_changes_nothing():
    s = Scheduler(store=SqlStore("sqlite://"))
    s.put_node({"name": "n0", "gpus": 8, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "a", "limit": {"gpu": 4}}, now=0)
    w = s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 2}, "name": "x"}, now=0)
    cases = [({"resources": {"gpu": 2}, "workers": 3, "name": "y"}, ValidationError,
              "asks for 6 GPUs but queue 'a' is limited to 4"),
             ({"resources": {"gpu": 9}}, ValidationError, "no node in the cluster can hold one worker with 9 GPU"),
             ({"resources": {"gpu": -1}}, ValidationError, "gpu"),
             ({"resources": "lots"}, ValidationError, "resources must be a mapping"),
             ({"kind": "inference"}, ValidationError, "kind cannot be changed; what can: name, resources"),
             ({"user": "eve"}, ValidationError, "user cannot be changed"),
             ({}, ValidationError, "say what to change"),
             ({"name": "bad\x1b[31m"}, ValidationError, "must not contain control characters"),
             ({"time_limit": 0}, ValidationError, "time_limit"),
             ({"workers": 1.5}, ValidationError, "workers must be a whole number")]
    for changes, error, words in cases:
        with pytest.raises(error, match=words.replace("(", "\\(").replace("[", "\\[")):
            s.update(w.id, changes, now=5)
    fresh = Scheduler(store=s.store).get(w.id)        # the store holds what memory holds: the original
    for x in (s.get(w.id), fresh):
        assert (x.request, x.workers, x.name, x.state) == ({"gpu": 2}, 1, "x", PENDING)
    assert not [e for e in s.events(workload_id=w.id) if e.kind == "updated"]
    with pytest.raises(NotFound):
        s.update("w9999999", {"name": "z"}, now=5)


def test_running_work_changes_only_its_name_checkpoints_and_a_shorter_limit():
    s = cluster()
    w = job(s, gpus=2, now=0, time_limit=7200)
    s.cycle(now=1)
    assert s.get(w.id).state == ADMITTED
    with pytest.raises(Conflict, match="is admitted: only its name, time_limit, checkpoint_every can change now, "
                                       "not resources, workers; cancel it"):
        s.update(w.id, {"resources": {"gpu": 4}, "workers": 2}, now=2)
    s.update(w.id, {"time_limit": 3600, "name": "shorter", "checkpoint_every": 600}, now=3, actor="ada")
    assert (s.get(w.id).time_limit, s.get(w.id).checkpoint_every, s.get(w.id).state) == (3600, 600, ADMITTED)
    for longer in (7200, None):
        with pytest.raises(Forbidden, match="only an admin may give workload .* more time \\(3600 s now"):
            s.update(w.id, {"time_limit": longer}, now=4, actor="ada")
    assert s.update(w.id, {"time_limit": None}, now=5, actor="root", admin=True).time_limit is None
    s.put_queue({"name": "a", "parent": "org", "limit": {"gpu": 1}}, now=5)      # lowered under it since
    assert s.update(w.id, {"name": "still mine"}, now=5).name == "still mine"
    s.mark_finished(w.id, now=6)
    with pytest.raises(Conflict, match="is finished: ended work cannot be changed"):
        s.update(w.id, {"name": "late"}, now=7)


def test_setting_a_limit_where_none_was_is_shorter_and_backfill_then_uses_it():
    s = cluster(nodes=1, queues=[{"name": "a", "guaranteed": {"gpu": 8}}])
    running = job(s, gpus=4, now=0, time_limit=3600)
    s.cycle(now=0)
    head = job(s, gpus=8, now=1, time_limit=7200)       # first in line: the node is held for it at 3600
    small = job(s, gpus=4, now=2)                       # no limit: starting it could delay head
    s.cycle(now=10)
    assert (s.get(running.id).state, s.get(head.id).state, s.get(small.id).state) == (ADMITTED, PENDING, PENDING)
    # Its reason says how long the gap is and how to use it (head starts at 3600, 59m50s from now).
    assert s.explain(small.id, now=10)["reason"] == (
        f"capacity is held for a workload {head.id}, which is ahead in line and starts in 59m: with a time "
        f"limit of at most 59m this could start in the gap (computehub update {small.id} --time 59m --test-only says)")
    _, _, then = s.preview_update(small.id, {"time_limit": 59 * 60}, now=10)
    assert then["eta"] == 10                                            # as it said
    s.update(small.id, {"time_limit": 600}, now=11, actor="ada")       # no admin needed: a limit is shorter
    s.cycle(now=12)
    assert (s.get(head.id).state, s.get(small.id).state) == (PENDING, ADMITTED)


def test_growing_above_the_approval_threshold_asks_an_admin_again_and_shrinking_under_it_lets_it_go():
    s = cluster(queues=[{"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 4}},
                        {"name": "b", "guaranteed": {"gpu": 8}}])
    _busy(s)
    w = job(s, gpus=2, now=10)
    s.update(w.id, {"resources": {"gpu": 6}}, now=20, actor="ada")
    w = s.get(w.id)
    assert (w.state, w.id in s.state.pending) == (AWAITING_APPROVAL, False)
    assert "needs an admin's approval above 4" in w.reason
    assert [e.kind for e in s.events(workload_id=w.id)][-2:] == ["updated", "approval_requested"]
    assert [x.id for x in s.approvals()] == [w.id]
    s.update(w.id, {"resources": {"gpu": 5}}, now=30)          # still above: still waits for an admin
    assert s.get(w.id).state == AWAITING_APPROVAL
    s.update(w.id, {"resources": {"gpu": 4}}, now=40)
    assert (s.get(w.id).state, w.id in s.state.pending, s.get(w.id).eligible_since) == (PENDING, True, 20)
    approved = job(s, gpus=6, now=50)
    s.decide(approved.id, True, now=60, actor="root")
    s.update(approved.id, {"resources": {"gpu": 5}}, now=70)     # approved for 6: 5 needs nobody
    assert s.get(approved.id).state == PENDING


def test_held_work_stays_held_and_notebooks_are_not_changed():
    s = cluster()
    w = job(s, gpus=1, now=0, hold=True)
    s.update(w.id, {"resources": {"gpu": 2}, "gpu_model": None}, now=5)
    assert (s.get(w.id).state, s.get(w.id).request, w.id in s.state.held) == (HELD, {"gpu": 2}, True)
    nb = job(s, kind="notebook", gpus=1, now=6)
    with pytest.raises(Conflict, match="a notebook asks for what its spawn chose"):
        s.update(nb.id, {"name": "x"}, now=7)


def test_gpu_model_follows_the_resources():
    s = cluster(nodes=1, model="a100")
    s.put_node({"name": "h0", "gpus": 8, "gpu_model": "h100", "cpu": 64, "memory": "512Gi"}, now=0)
    w = job(s, gpus=1, now=0, gpu_model="a100", hold=True)
    s.update(w.id, {"resources": {"gpu:h100": 2}}, now=1)
    assert (s.get(w.id).gpu_model, s.get(w.id).request) == ("h100", {"gpu": 2, "gpu:h100": 2})
    s.update(w.id, {"resources": {"gpu:a100": 1}}, now=2)          # one a100: one GPU, not the two before
    assert (s.get(w.id).gpu_model, s.get(w.id).request) == ("a100", {"gpu": 1, "gpu:a100": 1})
    s.update(w.id, {"resources": {"gpu": 0, "gpu:a100": 0, "cpu": 2}}, now=2)
    assert (s.get(w.id).gpu_model, s.get(w.id).request) == (None, {"cpu": 2000})
    with pytest.raises(ValidationError, match="gpu_model 'a100' given but no GPUs requested"):
        s.update(w.id, {"gpu_model": "a100"}, now=3)


def test_a_change_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'ch.db'}"
    s = Scheduler(store=SqlStore(url))
    s.put_node({"name": "n0", "gpus": 8, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "a"}, now=0)
    w = s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 2}, "hold": True}, now=0)
    s.update(w.id, {"resources": {"gpu": 4}, "workers": 2, "time_limit": 600, "name": "after"}, now=1)
    again = Scheduler(store=SqlStore(url)).get(w.id)
    assert (again.request, again.workers, again.time_limit, again.name, again.state) == (
        {"gpu": 4}, 2, 600, "after", HELD)


def test_a_whole_job_array_changes_in_one_go_or_not_at_all():
    s = cluster(nodes=1, queues=[{"name": "a", "guaranteed": {"gpu": 8}, "user_limit": {"gpu": 2}}])
    tasks = s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}, "array": "0-3"},
                     now=0)
    s.cycle(now=1)
    running = [t.id for t in tasks if s.get(t.id).state == ADMITTED]
    waiting = [t.id for t in tasks if s.get(t.id).state == PENDING]
    assert len(running) == 2 and len(waiting) == 2             # her user limit: 2 GPUs
    with pytest.raises(ValidationError, match="your limit in queue 'a' is 2"):
        s.update_array(tasks[0].id, {"resources": {"gpu": 3}}, now=2)
    assert all(s.get(t.id).request == {"gpu": 1} for t in tasks)
    changed = s.update_array(tasks[3].id, {"resources": {"cpu": 2}, "time_limit": 600}, now=3, actor="ada")
    assert [t.id for t in changed] == waiting
    assert all(s.get(i).request == {"gpu": 1, "cpu": 2000} and s.get(i).time_limit == 600 for i in waiting)
    assert all(s.get(i).request == {"gpu": 1} and s.get(i).time_limit is None for i in running)
    assert sum(e.kind == "updated" for e in s.events()) == 2
    lone = job(s, gpus=1, now=4)
    with pytest.raises(ValidationError, match=f"workload {lone.id} is not in a job array"):
        s.update_array(lone.id, {"name": "x"}, now=5)
    for i in waiting:
        s.cancel(i, now=6)
    with pytest.raises(Conflict, match="no task of job array .* is waiting"):
        s.update_array(tasks[0].id, {"name": "x"}, now=7)


def test_a_change_is_tried_before_it_is_made():
    s = cluster(nodes=1, queues=[{"name": "a", "guaranteed": {"gpu": 8}}])
    running = job(s, gpus=4, now=0, time_limit=3600)
    s.cycle(now=0)
    head = job(s, gpus=8, now=1, time_limit=7200)
    w = job(s, gpus=6, now=2, time_limit=600)
    s.cycle(now=10)
    then, before, after = s.preview_update(w.id, {"resources": {"gpu": 4}}, now=11)
    assert (before["position"], before["eta"]) == (1, 3600)        # first (its short limit), 4 GPUs free
    assert (after["position"], after["eta"], after["eta_reason"]) == (1, 11, "now")     # 4 fit now
    assert then.request == {"gpu": 4} and s.get(w.id).request == {"gpu": 6}      # nothing changed
    assert not [e for e in s.events(workload_id=w.id) if e.kind == "updated"]
    _, _, slower = s.preview_update(w.id, {"time_limit": 7200}, now=11)          # anyone may try more time
    assert (slower["position"], slower["eta"]) == (2, 3600 + 7200)     # behind head, as long, but older
    with pytest.raises(ValidationError, match="no node in the cluster can hold one worker with 9"):
        s.preview_update(w.id, {"resources": {"gpu": 9}}, now=11)
    s.hold(w.id, now=12)         # held by hand: estimated as if released now, with the change and without
    then, before, after = s.preview_update(w.id, {"resources": {"gpu": 4}}, now=13)
    assert (before["eta"], after["eta"], after["eta_reason"]) == (3600, 13, "now (if released now)")
    assert s.get(w.id).state == HELD and w.id not in s.state.pending
    later = job(s, gpus=1, now=14, after=[w.id])        # runs after work held by hand: no estimate
    _, _, after = s.preview_update(later.id, {"name": "x"}, now=15)
    assert after["eta"] is None and after["state"] == HELD
    assert after["eta_reason"] == f"{w.id}, which it waits on, is held by hand: no start estimate until it is released"
    assert head and running


def test_the_tasks_of_an_array_changed_together_share_nothing():
    s = cluster(nodes=1)
    tasks = s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}, "array": "0-2",
                      "hold": True}, now=0)
    s.update_array(tasks[0].id, {"resources": {"gpu": 2}}, now=1)
    a, b = s.get(tasks[0].id), s.get(tasks[1].id)
    assert a.request == b.request == {"gpu": 2} and a.request is not b.request
    assert [e.kind for e in s.events(workload_id=b.id)][-1] == "updated"


def test_a_gap_is_said_in_whole_minutes_as_time_takes_them():
    assert [minutes(x) for x in (59, 60, 3599, 3600, 6000, 86400 + 4 * 3600 + 59)] == [
        "0m", "1m", "59m", "1h", "1h40m", "1d4h"]


def test_the_tasks_of_an_array_waiting_in_one_state_change_alone():
    s = cluster(nodes=1, gpus=1)
    tasks = s.submit({"user": "ada", "queue": "a", "kind": "batch", "resources": {"gpu": 1}, "time_limit": 3600,
                      "array": "0-3", "hold": True}, now=0)
    s.release(tasks[0].id, now=1, actor="ada")
    s.release(tasks[1].id, now=1, actor="ada")
    s.cycle(now=2)
    assert [s.get(t.id).state for t in tasks] == [ADMITTED, PENDING, HELD, HELD]
    changed = s.update_array(tasks[0].id, {"time_limit": 600}, now=3, actor="ada", states=(HELD,))
    assert [t.id for t in changed] == [tasks[2].id, tasks[3].id]      # the held row only
    assert [s.get(t.id).time_limit for t in tasks] == [3600, 3600, 600, 600]
    with pytest.raises(ValidationError, match="waiting states only"):
        s.update_array(tasks[0].id, {"time_limit": 600}, now=4, states=(ADMITTED,))
    with pytest.raises(Conflict, match=r"is waiting \(awaiting_approval\)"):
        s.update_array(tasks[0].id, {"time_limit": 600}, now=4, states=("awaiting_approval",))
