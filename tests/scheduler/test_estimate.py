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
