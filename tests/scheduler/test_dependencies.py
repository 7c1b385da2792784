"""Work that runs after other work (``after``, scheduler/dependencies.py): held until what it runs
after has ended as asked, cancelled when that can no longer happen, aged from its release."""

import pytest

from scheduler import EngineConfig, Scheduler
from scheduler.errors import TooManyWaiting, ValidationError
from scheduler.model import ADMITTED, AWAITING_APPROVAL, CANCELLED, HELD, PENDING, RUNNING
from scheduler.store.sql import SqlStore

from sched_helpers import cluster, job


def test_after_is_parsed_into_ids_with_conditions():
    from scheduler.dependencies import parse
    assert parse(["w12", "13:any", " w0000014:failed "]) == ["w0000012:ok", "w0000013:any", "w0000014:failed"]
    assert parse(["w12", "w0000012"]) == ["w0000012:ok"]         # the same dependency twice is one
    assert parse(["w12[]:any"]) == ["w0000012[]:any"]            # every task of job array w12 (test_arrays.py)
    assert parse(None) == []
    for bad, says in (("w12", "a list"), ([12], "a list"), (["x1"], "'x1' is not a workload id"),
                      (["w12:done"], "not a workload id"), (["w12", "w12:any"], "names w0000012 twice"),
                      ([f"w{i}" for i in range(65)], "at most 64")):
        with pytest.raises(ValidationError, match=says):
            parse(bad)


def test_held_until_it_finishes_then_in_line_aged_from_then():
    s = cluster(nodes=1, gpus=8)
    first = job(s, gpus=8, now=0)
    s.cycle(now=1)
    then = job(s, gpus=2, now=2, after=[first.id])
    assert (then.state, then.after) == (HELD, [f"{first.id}:ok"])
    assert then.reason == f"runs after {first.id} finishes (it is admitted)"
    other = job(s, gpus=2, now=50)             # submitted later than `then`, pending all along
    s.mark_running(first.id, now=3)
    assert s.explain(then.id, now=10)["reason"] == f"runs after {first.id} finishes (it is running)"
    for t in (10, 20):
        s.cycle(now=t)
        assert s.get(then.id).state == HELD and then.id not in s.state.pending
    s.mark_finished(first.id, now=100)
    s.cycle(now=101)     # released, and ordered by its wait since then: `other` waited longer
    assert s.get(then.id).state == ADMITTED and s.get(then.id).eligible_at == 101
    released = s.events(kinds=("released",))
    assert [(e.workload_id, e.reason) for e in released] == [(then.id, f"{first.id} finished")]
    assert s.engine.order() == [] and s.get(other.id).state == ADMITTED


def test_the_wait_counts_from_the_release_not_the_submission():
    """Held work earns no age: once released it goes after work that waited longer for GPUs."""
    s = cluster(nodes=1, gpus=8)
    blocker = job(s, gpus=8, now=0, time_limit=3600)
    s.cycle(now=1)
    cpu_step = job(s, gpus=0, now=1, time_limit=60)
    held = job(s, gpus=8, now=2, after=[cpu_step.id], time_limit=3600)
    s.cycle(now=3)
    s.mark_finished(cpu_step.id, now=3000)
    rival = job(s, gpus=8, now=1000, time_limit=3600)      # waiting for GPUs since 1000
    s.cycle(now=3001)
    assert [w.id for w in s.engine.order()] == [rival.id, held.id]
    assert s.get(held.id).eligible_since == 3001 and s.get(rival.id).eligible_since == 1000
    assert blocker.state in (ADMITTED, RUNNING)


@pytest.mark.parametrize("cond,ends,runs", [
    ("ok", "finished", True), ("ok", "failed", False), ("ok", "cancelled", False),
    ("any", "failed", True), ("any", "cancelled", True), ("any", "finished", True),
    ("failed", "failed", True), ("failed", "cancelled", True), ("failed", "finished", False)])
def test_each_condition(cond, ends, runs):
    s = cluster(nodes=1, gpus=8)
    first = job(s, gpus=1, now=0)
    s.cycle(now=1)
    then = job(s, gpus=1, now=2, after=[f"{first.id}:{cond}"])
    if ends == "cancelled":
        s.cancel(first.id, now=5)
    else:
        s.mark_finished(first.id, now=5, exit_code=0 if ends == "finished" else 3)
    s.cycle(now=6)
    w = s.get(then.id)
    if runs:
        assert w.state == ADMITTED
    else:
        assert w.state == CANCELLED and w.ended_at == 6
        assert w.reason.startswith(f"{first.id} {ends}") and w.reason.endswith(
            f"this was to run after it {'finishes' if cond == 'ok' else 'ends without finishing'}")
        assert ("exit code 3" in w.reason) == (ends == "failed")    # how it ended, as its reason says


def test_a_chain_is_resolved_in_one_cycle_and_waits_for_all():
    s = cluster(nodes=1, gpus=8)
    a, b = job(s, gpus=1, now=0), job(s, gpus=1, now=0)
    s.cycle(now=1)
    c = job(s, gpus=1, now=2, after=[a.id, b.id])
    d = job(s, gpus=1, now=2, after=[c.id])
    e = job(s, gpus=1, now=2, after=[f"{c.id}:failed"])
    s.mark_finished(a.id, now=3)
    s.cycle(now=4)
    assert s.get(c.id).state == HELD and s.explain(c.id, now=4)["reason"] == \
        f"runs after {b.id} finishes (it is admitted)"
    s.mark_finished(b.id, now=5, exit_code=1)
    s.cycle(now=6)           # c never runs: d (after c finishes) is cancelled too, e (after c fails) runs
    assert [s.get(x.id).state for x in (c, d, e)] == [CANCELLED, CANCELLED, ADMITTED]
    assert s.get(d.id).reason.startswith(f"{c.id} cancelled: {b.id} failed: exit code 1")


def test_refused_at_submission():
    s = cluster(nodes=1, gpus=8)
    mine = job(s, gpus=1, now=0)
    theirs = job(s, gpus=1, user="bo", now=0)
    s.cycle(now=1)
    s.mark_finished(mine.id, now=2, exit_code=2)
    for after, says in (([theirs.id], f"no workload {theirs.id} of ada's"), (["w999"], "no workload w0000999"),
                        ([mine.id], f"{mine.id} failed: exit code 2; work to run after it finishes would "
                                    "never start")):
        with pytest.raises(ValidationError, match=says):
            job(s, gpus=1, now=3, after=after)
    with pytest.raises(ValidationError, match="a notebook cannot run after"):
        job(s, kind="notebook", now=3, after=[theirs.id])
    # Already ended as asked: in line at once, its age from its submission.
    w = job(s, gpus=1, now=4, after=[f"{mine.id}:failed"])
    assert w.state == PENDING and w.eligible_at is None


def test_cancel_approval_and_the_cap():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 4}}])
    first = job(s, gpus=1, now=0)
    held = job(s, gpus=1, now=1, after=[first.id])
    s.cancel(held.id, now=2)
    assert s.get(held.id).state == CANCELLED and held.id not in s.state.held
    big = job(s, gpus=6, now=3, after=[first.id])
    assert big.state == AWAITING_APPROVAL
    s.decide(big.id, True, now=4)
    assert s.get(big.id).state == HELD
    s.cycle(now=5)
    s.mark_finished(first.id, now=6)
    s.cycle(now=7)
    assert s.get(big.id).state == ADMITTED
    s.max_waiting_per_user = 2
    nxt = job(s, gpus=4, now=8)           # waits: 6 of the 8 GPUs are taken
    job(s, gpus=1, now=8, after=[nxt.id])        # held work counts as work in line
    with pytest.raises(TooManyWaiting):
        job(s, gpus=1, now=8)


def test_held_work_survives_a_restart_and_a_purged_dependency(store_url):
    url = store_url           # SQLite and PostgreSQL
    s = Scheduler(store=SqlStore(url), config=EngineConfig())
    s.put_node({"name": "n0", "gpus": 8}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}}, now=0)
    spec = {"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}}
    a, b = s.submit(spec, now=0), s.submit(spec, now=0)
    s.cycle(now=1)
    ok = s.submit({**spec, "after": [a.id]}, now=2)
    anyway = s.submit({**spec, "after": [f"{b.id}:any"]}, now=2)
    s.mark_finished(a.id, now=3)
    s.mark_finished(b.id, now=3)
    s.store.close()

    s = Scheduler(store=SqlStore(url), config=EngineConfig())
    assert set(s.state.held) == {ok.id, anyway.id}
    s.store.purge_history(workloads_before=10)          # a and b's records gone
    s.cycle(now=20)
    assert s.get(ok.id).state == CANCELLED and "record is gone" in s.get(ok.id).reason
    assert s.get(anyway.id).state == ADMITTED
    s.store.close()


def test_an_ended_dependency_is_read_from_the_store_once_not_every_cycle(monkeypatch):
    s = cluster(nodes=1, gpus=8)
    a, b = job(s, gpus=1, now=0), job(s, gpus=1, now=0)
    s.cycle(now=1)
    w = job(s, gpus=1, now=2, after=[a.id, b.id])
    s.mark_finished(a.id, now=3)
    reads = []
    real = s.store.get_workload
    monkeypatch.setattr(s.store, "get_workload", lambda wid: reads.append(wid) or real(wid))
    for t in range(4, 10):
        s.cycle(now=t)
    assert reads == [a.id] and s.get(w.id).state == HELD      # b still runs
    s.mark_finished(b.id, now=10)
    s.cycle(now=11)
    assert s.get(w.id).state == ADMITTED and not s._ended_dependencies   # nothing kept
