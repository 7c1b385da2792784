"""A user's own order (scheduler/tops.py, Slurm's ``scontrol top``): a waiting job put first among
its owner's own work of its queue and class, taking the best place any of them had; other
users' places unchanged; kept through a restart; only waiting work."""

import pytest

from scheduler import EngineConfig, Scheduler
from scheduler.errors import Conflict, ValidationError
from scheduler.store.sql import SqlStore

from sched_helpers import cluster, job


def ids(s) -> list[str]:
    return [w.id for w in s.engine.order()]


def test_a_job_put_first_takes_the_best_place_its_owners_work_had_and_no_one_elses():
    s = cluster(nodes=1, gpus=8)
    blocker = job(s, gpus=8, now=0, user="carl", time_limit=3600)
    s.cycle(now=1)
    a1 = job(s, gpus=1, now=10, user="ada", time_limit=600)
    b1 = job(s, gpus=1, now=20, user="bob", time_limit=600)
    a2 = job(s, gpus=1, now=30, user="ada", time_limit=600)
    a3 = job(s, gpus=1, now=40, user="ada", time_limit=600)
    b2 = job(s, gpus=1, now=50, user="bob", time_limit=600)
    before = ids(s)
    assert before == [a1.id, b1.id, a2.id, a3.id, b2.id]
    s.top(a3.id, now=60, actor="ada")
    assert ids(s) == [a3.id, b1.id, a1.id, a2.id, b2.id]       # bob's places: the same
    s.top(a2.id, now=70, actor="ada")                          # the latest put first goes first
    assert ids(s) == [a2.id, b1.id, a3.id, a1.id, b2.id]
    e = s.explain(a2.id, now=71)
    assert (e["position"], e["position_in_queue"]) == (1, 1)
    # Its start estimate follows its new place: it starts when the blocker's GPUs come back.
    assert e["eta"] == s.get(blocker.id).admitted_at + 3600
    assert [e.kind for e in s.events(workload_id=a2.id)][-1] == "topped"
    s.mark_finished(blocker.id, now=100)
    s.cycle(now=101)
    assert s.get(a2.id).state == "admitted" and a2.id not in s.state.pending.topped


def test_only_within_the_same_queue_and_class_and_only_waiting_work():
    s = cluster(nodes=1, gpus=8)
    running = job(s, gpus=8, now=0, user="carl", time_limit=3600)
    s.cycle(now=1)
    a1 = job(s, gpus=1, now=10, user="ada", time_limit=600)
    a2 = job(s, gpus=1, now=20, user="ada", time_limit=600, priority="preemptible")
    s.top(a2.id, now=30, actor="ada")
    assert ids(s).index(a1.id) < ids(s).index(a2.id)            # another class: its own line
    with pytest.raises(Conflict, match="is admitted; only waiting work can go first"):
        s.top(running.id, now=31)
    with pytest.raises(ValidationError, match="'top' are set by ComputeHub"):
        s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1},
                  "metadata": {"top": 1}}, now=32)


def test_put_first_while_held_and_kept_through_a_restart(store_url):
    s = Scheduler(store=SqlStore(store_url), config=EngineConfig())
    s.put_node({"name": "n0", "gpus": 1}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 1}}, now=0)
    spec = {"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}, "time_limit": 600}
    s.submit(spec, now=1)
    s.cycle(now=2)
    first = s.submit(spec, now=3)
    later = s.submit({**spec, "hold": True}, now=4)
    s.top(later.id, now=5, actor="ada")
    s.release(later.id, now=6, actor="ada")
    assert [w.id for w in s.engine.order()] == [later.id, first.id]
    s.store.close()
    s = Scheduler(store=SqlStore(store_url), config=EngineConfig())
    assert [w.id for w in s.engine.order()] == [later.id, first.id]
    s.store.close()


def test_an_arrays_waiting_tasks_are_put_first_in_index_order_in_one_go():
    s = cluster(nodes=1, gpus=8)
    job(s, gpus=8, now=0, user="carl", time_limit=3600)
    s.cycle(now=1)
    mine = job(s, gpus=1, now=10, user="ada", time_limit=600)
    other = job(s, gpus=1, now=15, user="bob", time_limit=600)
    sweep = job(s, gpus=1, now=20, user="ada", time_limit=600, array="0-2")
    assert ids(s) == [mine.id, other.id, *(t.id for t in sweep)]
    out = s.act_on_array(sweep[0].id, "top", now=30, actor="ada")
    assert [w.id for w in out.done] == [t.id for t in sweep]
    assert ids(s) == [sweep[0].id, other.id, sweep[1].id, sweep[2].id, mine.id]     # bob's place kept
    with pytest.raises(ValidationError, match="a top takes no until"):
        s.act_on_array(sweep[0].id, "top", now=31, actor="ada", until=99)
