"""``Scheduler.give_back_unstarted`` (the service's ``start_deadline``): admitted work that
nothing reports running gives its GPUs back — requeued once where its class requeues, failed
the next time — and notebooks and work reported running are left alone. The scheduler on its
own clock (``now=``); tests/hub_ext/test_start_deadline_hub.py has the service."""

from __future__ import annotations

from scheduler import Scheduler
from scheduler.model import ADMITTED, FAILED, PENDING, RUNNING

HOUR = 3600.0


def sched() -> Scheduler:
    s = Scheduler()
    s.put_node({"name": "n0", "gpus": 2}, now=0)
    s.put_queue({"name": "q", "guaranteed": {"gpu": 2}}, now=0)
    return s


def submit(s, kind="training", gpus=1, now=0.0, **extra):
    return s.submit({"user": "ada", "queue": "q", "kind": kind, "resources": {"gpu": gpus}, **extra}, now=now)


def cycle(s, now, deadline=HOUR):
    """As the service runs a cycle: unstarted work past the deadline first."""
    s.give_back_unstarted(deadline, now=now)
    return s.cycle(now=now)


def kinds(s, wid):
    return [e.kind for e in s.events(workload_id=wid)]


def test_unstarted_work_is_requeued_once_then_fails_and_its_gpus_go_to_others():
    s = sched()
    bare = submit(s)                                   # nothing will run it
    started = submit(s)
    cycle(s, 0)
    s.mark_running(started.id, now=1)
    cycle(s, HOUR - 1)
    assert s.get(bare.id).state == ADMITTED
    waiting = submit(s, gpus=1, now=HOUR - 1)
    cycle(s, HOUR)
    # Given back and in line again (ahead of later work: it keeps its age), admitted anew.
    assert s.get(bare.id).state == ADMITTED and s.get(bare.id).admitted_at == HOUR
    assert kinds(s, bare.id).count("start_timeout") == 1 and "requeued" in kinds(s, bare.id)
    assert s.get(waiting.id).state == PENDING
    cycle(s, 2 * HOUR)
    w = s.workloads(states=None)
    assert bare.id not in {x.id for x in w}
    ended = [e for e in s.events(workload_id=bare.id) if e.kind == "start_timeout"]
    assert len(ended) == 2 and "nothing reported it running" in ended[-1].reason
    assert "the second time" in ended[-1].reason
    assert s.store.get_workload(bare.id).state == FAILED
    assert s.get(waiting.id).state == ADMITTED           # its GPU went to the next in line
    assert s.get(started.id).state == RUNNING             # reported running: left alone


def test_notebooks_and_no_deadline_are_left_alone():
    s = sched()
    nb = submit(s, kind="notebook")
    cycle(s, 0)
    cycle(s, 10 * HOUR)
    assert s.get(nb.id).state == ADMITTED
    off = sched()
    job = submit(off)
    cycle(off, 0, deadline=0)
    cycle(off, 10 * HOUR, deadline=0)
    assert off.get(job.id).state == ADMITTED


def test_a_class_that_does_not_requeue_fails_at_the_first_deadline():
    s = sched()
    s.put_class({"name": "once", "rank": 50, "requeue": False}, now=0)
    w = submit(s, priority="once")
    cycle(s, 0)
    cycle(s, HOUR)
    assert s.store.get_workload(w.id).state == FAILED
    assert "the second time" not in s.store.get_workload(w.id).reason
