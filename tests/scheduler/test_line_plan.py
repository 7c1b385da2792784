"""The line plan (scheduler/line_plan.py): one simulation of the whole line gives every waiting
workload its start estimate, and it is what the engine then does when running work ends at its
declared limit and nothing new arrives, backfill of work further back included, which a
workload's own estimate (the line ahead of it) leaves out."""

from sched_helpers import cluster, job

from scheduler.dependencies import MAX_CHAIN
from scheduler.estimate import MAX_STEPS, estimate_start
from scheduler.explain import explain
from scheduler.line_plan import LinePlan


def _run_forward(s, now: float) -> dict[str, float]:
    """Drive the live scheduler: each running workload ends at its declared limit, a cycle then;
    when each pending or held workload was admitted."""
    started = {}
    pending = {w.id for w in s.workloads(states=("pending", "held"))}
    for _ in range(200):
        s.cycle(now=now)
        for wid in list(pending):
            if s.get(wid).state not in ("pending", "held"):
                started[wid] = now
                pending.discard(wid)
        running = s.workloads(states=("admitted",))
        if not pending or not running:
            return started
        now = min(w.admitted_at + w.time_limit for w in running)
        for w in running:
            if w.admitted_at + w.time_limit <= now:
                s.mark_finished(w.id, now=now)
    raise AssertionError("the line did not drain")


def test_the_plan_is_what_the_engine_then_does_where_the_line_ahead_is_too_hopeful():
    # Skip-ahead backfill (no reservation): what waits behind may start first and keep the GPUs.
    s = cluster(nodes=1, gpus=4, queues=[{"name": "a"}], backfill="skip")
    job(s, gpus=1, time_limit=100, now=0)
    job(s, gpus=3, time_limit=200, now=0)
    s.cycle(now=0)
    whole = job(s, gpus=4, time_limit=600, now=10)         # first in line: needs the whole node
    small = job(s, gpus=1, time_limit=1000, now=10)        # behind it: takes the GPU freed at 100
    s.cycle(now=20)
    plan = LinePlan(s, 20)
    starts = plan.run()
    assert set(starts) == {whole.id, small.id} == plan.ids
    # Its own estimate sees only the line ahead of it: the node empties at 200.
    assert estimate_start(s, s.get(whole.id), 20)[0] == 200
    assert starts[small.id][0] == 100
    assert starts[whole.id][:2] == (1100, "if running work ends at its declared time limit")
    assert _run_forward(s, 20) == {small.id: 100, whole.id: 1100}


def test_the_plan_answers_for_a_mixed_line_as_the_engine_runs_it():
    s = cluster(nodes=2, gpus=4, preempt_for_shorter=0)
    for i, gpus in enumerate((2, 1, 4, 1, 3)):
        job(s, "a" if i % 2 else "b", user="ada" if i % 2 else "bob", gpus=gpus, time_limit=300 * (i + 1), now=0)
    s.cycle(now=0)
    waiting = [job(s, "ab"[i % 2], user="ab"[i % 2] + "x", gpus=1 + i % 4, time_limit=200 + 150 * (i % 5), now=5 + i)
               for i in range(14)]
    s.cycle(now=30)
    live = {w.id: (w.state, list(w.placement)) for w in s.workloads()}
    plan = LinePlan(s, 30)
    starts = plan.run()
    assert {w.id: (w.state, list(w.placement)) for w in s.workloads()} == live      # copies only
    pending = {w.id for w in s.workloads(states=("pending",))}
    assert len(pending & {w.id for w in waiting}) >= 8 and set(starts) == pending
    assert {wid: r[0] for wid, r in starts.items()} == _run_forward(s, 30)
    assert len({r[0] for r in starts.values()}) > 3


def test_the_plan_answers_for_the_state_it_was_made_from_whatever_changes_meanwhile():
    s = cluster(nodes=1, gpus=2, queues=[{"name": "a"}])
    running = job(s, gpus=2, time_limit=3600, now=0)
    s.cycle(now=0)
    first, second = job(s, gpus=2, time_limit=600, now=1), job(s, gpus=2, time_limit=600, now=2)
    s.cycle(now=10)
    plan = LinePlan(s, 10)
    s.mark_finished(running.id, now=20)
    s.cycle(now=20)
    assert s.get(first.id).state == "admitted"
    assert {wid: r[0] for wid, r in plan.run().items()} == {first.id: 3600, second.id: 4200}
    assert plan.run() is plan.run()


def test_work_behind_running_work_without_a_limit_is_not_estimated_and_says_why():
    s = cluster(nodes=1, gpus=2, queues=[{"name": "a"}])
    job(s, gpus=2, now=0)                                    # runs with no declared limit
    s.cycle(now=0)
    a, b = job(s, gpus=1, time_limit=60, now=1), job(s, gpus=2, time_limit=60, now=2)
    s.cycle(now=5)
    starts = LinePlan(s, 5).run()
    why = "unknown: 1 running workload(s) ahead declare no run-time limit"
    assert starts[a.id][:2] == starts[b.id][:2] == (None, why)
    assert starts[a.id][2] is not None and starts[a.id][2].code == "capacity"   # the first cycle's verdict


def test_a_line_longer_than_the_look_ahead_says_how_far_it_looked():
    s = cluster(nodes=1, gpus=1, queues=[{"name": "a"}])
    job(s, gpus=1, time_limit=10, now=0)
    s.cycle(now=0)
    line = [job(s, gpus=1, time_limit=10, now=1) for _ in range(MAX_STEPS + 3)]
    s.cycle(now=2)
    starts = LinePlan(s, 2).run()
    # A cycle now, then one a completion: the last one it sees started is the (MAX_STEPS - 1)th.
    assert starts[line[0].id][0] == 10 and starts[line[MAX_STEPS - 2].id][0] == 10 * (MAX_STEPS - 1)
    for w in line[MAX_STEPS - 1:]:
        assert starts[w.id][:2] == (None, f"beyond the next {MAX_STEPS} completions")


def test_held_work_is_planned_from_when_what_it_runs_after_ends_as_its_own_estimate_has_it():
    s = cluster(nodes=1, gpus=1, queues=[{"name": "a"}])
    first = job(s, gpus=1, time_limit=100, now=0)
    s.cycle(now=0)
    ahead = job(s, gpus=1, time_limit=30, now=1)
    then = job(s, gpus=1, time_limit=50, now=2, after=[first.id])
    last = job(s, gpus=1, time_limit=20, now=3, after=[then.id])
    s.cycle(now=5)
    plan = LinePlan(s, 5, held=s.held_lines())
    starts = plan.run()
    assert plan.ids == {ahead.id} and plan.held == {then.id, last.id}
    # It joins the line when what it runs after ends, behind the line of then.
    assert {i: r[0] for i, r in starts.items()} == {ahead.id: 100, then.id: 130, last.id: 180}
    assert starts[last.id][1].startswith("if what it runs after finishes by its declared time limit")
    for w in (then, last):
        assert explain(s, s.get(w.id), 5)["eta"] == starts[w.id][0]
    assert _run_forward(s, 5) == {ahead.id: 100, then.id: 130, last.id: 180}


def test_held_work_competes_in_the_plan_with_other_held_work_which_its_own_estimate_leaves_out():
    s = cluster(nodes=1, gpus=2, queues=[{"name": "a"}], preempt_for_shorter=0)
    r1 = job(s, gpus=1, time_limit=100, now=0)
    job(s, gpus=1, time_limit=200, now=0)
    s.cycle(now=0)
    whole = job(s, gpus=2, time_limit=500, now=1, after=[r1.id])    # joins at 100: the node frees at 200
    small = job(s, gpus=1, time_limit=150, now=2, after=[r1.id])    # would end past 200: no backfill
    s.cycle(now=5)
    starts = LinePlan(s, 5, held=s.held_lines()).run()
    assert explain(s, s.get(small.id), 5)["eta"] == 100     # alone behind r1: the GPU it frees
    # Both join at 100; the reservation for the whole node keeps the small one from the GPU r1
    # frees, and at 200 the small one has waited longer for its length (the expansion factor).
    assert (starts[whole.id][0], starts[small.id][0]) == (350, 200)
    assert _run_forward(s, 5) == {whole.id: 350, small.id: 200}


def test_the_plan_leaves_out_held_work_that_can_have_no_estimate_and_whatever_runs_after_it():
    s = cluster(nodes=1, gpus=1, queues=[{"name": "a"}])
    first = job(s, gpus=1, time_limit=1000, now=0)
    s.cycle(now=0)
    by_hand = job(s, gpus=1, time_limit=10, now=1, after=[first.id])
    s.hold(by_hand.id, now=1)
    behind_hold = job(s, gpus=1, time_limit=10, now=2, after=[by_hand.id])
    if_failed = job(s, gpus=1, time_limit=10, now=3, after=[f"{first.id}:failed"])
    behind_failed = job(s, gpus=1, time_limit=10, now=4, after=[if_failed.id])
    chain = [job(s, gpus=1, time_limit=1, now=5, after=[first.id])]
    for i in range(MAX_CHAIN):
        chain.append(job(s, gpus=1, time_limit=1, now=6 + i, after=[chain[-1].id]))
    s.cycle(now=300)
    lines = s.held_lines()
    assert not {by_hand.id, behind_hold.id, if_failed.id, behind_failed.id} & set(lines)
    assert lines[chain[0].id] == [first.id] and lines[chain[5].id] == [chain[4].id] and len(lines) == len(chain)
    # No bound on how many follow one another in a plan: the last of the chain is estimated,
    # where its own estimate gives up.
    starts = LinePlan(s, 300, held=lines).run()
    assert starts[chain[-1].id][0] == 1000 + MAX_CHAIN
    assert explain(s, s.get(chain[-1].id), 300)["eta"] is None
