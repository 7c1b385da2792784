"""Start estimates made in two steps (scheduler/estimate.py): copied from the live state, then
simulated on the copy alone, as the service does in its worker thread while its loop goes on."""

from sched_helpers import cluster, job

from scheduler.estimate import Estimate, estimate_start, settle
from scheduler.explain import explain_steps
from scheduler.what_if import preview_steps


def _line():
    s = cluster(nodes=1, gpus=4)
    running = [job(s, "a", gpus=2, time_limit=3600, now=0), job(s, "b", user="bob", gpus=2, time_limit=7200, now=0)]
    s.cycle(now=0)
    first = job(s, "a", gpus=4, time_limit=600, now=10)
    second = job(s, "b", user="bob", gpus=2, time_limit=600, now=11)
    s.cycle(now=20)
    return s, running, first, second


def test_an_estimate_answers_for_the_state_it_was_made_from_whatever_changes_meanwhile():
    s, running, first, second = _line()
    expected = estimate_start(s, second, 20)
    assert expected[0] == 3600 and expected[1] == "if running work ends at its declared time limit"
    est = Estimate(s, second, 20)
    # Meanwhile the live scheduler moves on: running work ends, shorter work arrives and starts.
    for w in running:
        s.mark_finished(w.id, now=30)
    short = job(s, "a", gpus=4, time_limit=60, now=31)
    s.cycle(now=40)
    live = {w.id: (w.state, list(w.placement)) for w in s.workloads()}
    free = dict(s.state.inventory.free)
    assert live[short.id][0] == "admitted" and live[second.id][0] == "pending"
    assert est.run() == expected
    # ... and the simulation touched none of it.
    assert {w.id: (w.state, list(w.placement)) for w in s.workloads()} == live
    assert s.state.inventory.free == free
    assert estimate_start(s, second, 40)[0] == 100          # a fresh estimate sees the new state


def test_explanations_made_step_by_step_are_those_made_at_once():
    s, _, first, second = _line()
    steps = explain_steps(s, second, 20)
    est = next(steps)
    assert isinstance(est, Estimate)
    try:
        steps.send(est.run())
    except StopIteration as done:
        stepwise = done.value
    assert stepwise == s.explain(second.id, now=20)
    assert stepwise["eta"] == 3600 and stepwise["pending"] == 2
    # Work not in line needs no estimate at all: the generator ends at once.
    assert settle(explain_steps(s, s.get(first.id), 20))["state"] == "pending"
    assert settle(explain_steps(s, s.workloads(states=("admitted",))[0], 20))["state"] == "admitted"


def test_a_dry_run_with_a_kept_explanation_makes_one_estimate_and_without_two():
    s, _, _, second = _line()
    kept = s.explain(second.id, now=20)
    made = []

    def count(steps):
        try:
            est = next(steps)
            while True:
                made.append(est)
                est = steps.send(est.run())
        except StopIteration as done:
            return done.value

    then, before, after = count(preview_steps(s, second.id, {"time_limit": 300}, 20, kept))
    assert len(made) == 1 and before is kept and then.time_limit == 300
    made.clear()
    _, before2, after2 = count(preview_steps(s, second.id, {"time_limit": 300}, 20))
    assert len(made) == 2 and before2 == kept and after2 == after


def test_held_work_is_estimated_from_when_what_it_runs_after_ends():
    s = cluster(nodes=1, gpus=4, preemption=False)
    first = job(s, "a", gpus=4, time_limit=3600, now=0)
    s.cycle(now=0)
    then = job(s, "a", gpus=2, time_limit=1800, now=1, after=[first.id])
    last = job(s, "a", gpus=4, time_limit=600, now=2, after=[then.id])       # after work held in turn
    other = job(s, "a", gpus=2, time_limit=7200, now=3)                      # in line now: ahead of both
    s.cycle(now=5)
    assert [s.get(w.id).state for w in (then, last, other)] == ["held", "held", "pending"]
    e = s.explain(then.id, now=10)
    assert e["eta"] == 3600 and e["eta_seconds"] == 3590 and "what it runs after finishes" in e["eta_reason"]
    assert e["reason"] == f"runs after {first.id} finishes (it is admitted)"
    # `then` ends at 5400, but `other` (in line first, 3600 to 10800) leaves only 2 GPUs until it ends.
    assert s.explain(last.id, now=10)["eta"] == 10800
    assert s.explain(other.id, now=10)["eta"] == 3600
    assert s.get(last.id).state == "held" and s.state.inventory.free["gpu"] == 0     # nothing changed


def test_held_work_says_why_it_has_no_estimate():
    s = cluster(nodes=1, gpus=4)
    forever = job(s, "a", gpus=2, now=0)                                     # no time limit
    s.cycle(now=0)
    after_forever = job(s, "a", gpus=1, time_limit=60, now=1, after=[forever.id])
    if_failed = job(s, "a", gpus=1, time_limit=60, now=1, after=[f"{forever.id}:failed"])
    by_hand = job(s, "a", gpus=1, time_limit=60, now=1, after=[forever.id], hold=True)
    after_by_hand = job(s, "a", gpus=1, time_limit=60, now=1, after=[by_hand.id])
    s.cycle(now=2)
    e = s.explain(after_forever.id, now=3)
    assert e["eta"] is None and "declare no run-time limit" in e["eta_reason"]
    assert s.explain(if_failed.id, now=3)["eta_reason"] == (
        f"it runs only if {forever.id} ends without finishing: no start estimate")
    assert s.explain(by_hand.id, now=3)["eta_reason"] == "it is held by hand: no start estimate until it is released"
    assert s.explain(after_by_hand.id, now=3)["eta_reason"] == (
        f"{by_hand.id}, which it waits on, is held by hand: no start estimate until it is released")
    assert s.explain(after_by_hand.id, now=3)["eta"] is None


def test_a_change_to_held_work_is_tried_from_when_what_it_runs_after_ends():
    s = cluster(nodes=1, gpus=4, preemption=False)
    first = job(s, "a", gpus=4, time_limit=3600, now=0)
    s.cycle(now=0)
    then = job(s, "a", gpus=2, time_limit=1800, now=1, after=[first.id])
    last = job(s, "a", gpus=4, time_limit=600, now=2, after=[then.id])
    job(s, "a", gpus=2, time_limit=7200, now=3)                              # in line: 3600 to 10800
    s.cycle(now=5)
    changed, before, after = s.preview_update(last.id, {"resources": {"gpu": 2}}, now=10)
    # With 2 GPUs it fits beside the one in line as soon as `then` has ended (5400), not at 10800.
    assert (before["eta"], after["eta"]) == (10800, 5400) and changed.request["gpu"] == 2
    assert after["state"] == "held" and after["reason"] == before["reason"] and "position" not in after
    assert s.get(last.id).request["gpu"] == 4                               # only tried
    kept = s.explain(last.id, now=10)
    assert s.preview_update(last.id, {"resources": {"gpu": 2}}, now=10, explained=kept)[1] is kept
