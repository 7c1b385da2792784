"""How the service answers waiting work from the line's plan (hub_ext/estimates.py), driven
in-process on a real SQLite file: the first asked has its own estimate made and a plan of the
whole line follows it, which answers everyone else; a plan is kept as an explanation is, and
made again in the background once half of that has gone; work new in line since gets its own.
(Through the hub and proxy: test_estimates_hub, test_arrays_hub.)"""

import asyncio
import time

from hub_ext.app import ComputeHubService
from test_estimates_reuse import service

OWN = "computehub_start_estimate_duration_seconds_count"
PLANS = "computehub_line_plan_duration_seconds_count"


def made(svc) -> tuple[float, float]:
    get = svc.metrics.registry.get_sample_value
    return get(OWN) or 0.0, get(PLANS) or 0.0


def line(svc, n: int):
    """One job runs for an hour on the only GPU; ``n`` wait behind it, ten minutes each."""
    s = svc.sched
    running = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 3600})
    svc.run_cycle()
    waiting = [s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 600})
               for _ in range(n)]
    svc.run_cycle()
    return s.get(running.id).admitted_at + 3600, waiting


def test_one_plan_answers_a_whole_line_after_the_first_asked_has_its_own(tmp_path):
    svc = service(tmp_path, estimate_reuse=0.0)
    ends, waiting = line(svc, 6)

    async def ask_all():
        return [await svc.explanation(w) for w in waiting]

    async def scenario():
        es = await ask_all()
        assert made(svc) == (1, 1)
        # Another cycle: with estimate_reuse 0 the plan is stale, made again after an own estimate.
        svc.run_cycle()
        again = await svc.explanation(waiting[3])
        assert made(svc)[0] == 2
        if svc.estimates._planning is not None:        # made after it, and may be done already
            await svc.estimates._planning.future
        assert made(svc) == (2, 2)
        await ask_all()
        assert made(svc) == (2, 2)
        return es, again

    es, again = asyncio.run(scenario())
    assert [e["eta"] for e in es] == [ends + 600 * i for i in range(6)] and again["eta"] == ends + 1800
    assert [e["position"] for e in es] == [1, 2, 3, 4, 5, 6] and {e["pending"] for e in es} == {6}
    assert all(e["eta_reason"].startswith("if running work ends at its declared time limit") for e in es), es
    assert all(e["reason"] and e["queue_length"] == 6 for e in es), es


def test_a_plan_is_kept_and_made_again_in_the_background_once_half_its_time_has_gone(tmp_path):
    svc = service(tmp_path, estimate_reuse=1.0)
    ends, waiting = line(svc, 3)
    est = svc.estimates

    async def scenario():
        await svc.explanation(waiting[0])
        await svc.explanation(waiting[1])                  # waits for the plan
        first = est.plan
        svc.run_cycle()                                    # a later cycle: kept for 1 × what it took
        first.took, first.at = 10.0, time.monotonic() - 2
        kept = await svc.explanation(waiting[2])
        assert est.plan is first and est._planning is None and made(svc) == (1, 1)
        first.at = time.monotonic() - 6                    # past half: answered, and made again
        meanwhile = await svc.explanation(waiting[2])
        renewing = est._planning
        assert renewing is not None and est.plan is first
        await renewing.future
        return kept, meanwhile, first

    kept, meanwhile, first = asyncio.run(scenario())
    assert kept["eta"] == meanwhile["eta"] == ends + 1200
    assert est.plan is not first and est.plan.cycle == svc.cycles and made(svc) == (1, 2)


def test_work_new_in_line_since_the_plan_gets_its_own_estimate(tmp_path):
    svc = service(tmp_path, estimate_reuse=1e9)
    ends, waiting = line(svc, 2)

    async def scenario():
        await svc.explanation(waiting[0])
        await svc.explanation(waiting[1])
        late = svc.sched.submit({"user": "bob", "queue": "a", "resources": {"gpu": 1}, "time_limit": 600})
        before_cycle = await svc.explanation(late)         # not in line at a cycle yet
        svc.run_cycle()
        return late, before_cycle, await svc.explanation(late), await svc.explanation(waiting[1])

    late, before_cycle, after_cycle, planned = asyncio.run(scenario())
    assert after_cycle["eta"] == ends + 1200 and after_cycle["position"] == 3
    assert before_cycle["eta"] == ends + 1200
    # Its own estimate, kept (estimate_reuse), before and after its first cycle; the fresh plan kept.
    assert made(svc) == (2, 1) and planned["eta"] == ends + 600


def test_a_dry_run_compares_with_its_own_estimate_not_the_plans(tmp_path):
    """The plan counts work further back that starts first by backfill; a dry run simulates the line
    ahead of the changed workload, so it compares with the estimate made the same way: a change
    that changes nothing says it starts when it would have."""
    from traitlets.config import Config

    from scheduler.what_if import preview_steps
    svc = ComputeHubService(config=Config({"EngineConfig": {"backfill": "skip"}}), data_dir=str(tmp_path),
                            service_prefix="/services/computehub/", nodes=[{"name": "n0", "gpus": 4}],
                            initial_queues=[{"name": "a"}])
    svc.initialize([])
    s = svc.sched
    first = [s.submit({"user": "ada", "queue": "a", "resources": {"gpu": g}, "time_limit": t})
             for g, t in ((1, 100), (3, 200))]
    svc.run_cycle()
    t0 = s.get(first[0].id).admitted_at
    whole = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 4}, "time_limit": 600})
    s.submit({"user": "bob", "queue": "a", "resources": {"gpu": 1}, "time_limit": 1000})    # takes the GPU freed first
    svc.run_cycle()

    async def scenario():
        await svc.explanation(whole)
        if svc.estimates._planning is not None:
            await svc.estimates._planning.future
        planned, own = await svc.explanation(whole), await svc.estimates.own(whole)
        (_, before, after), _ = await svc.estimates.settle(
            preview_steps(s, whole.id, {"name": "renamed"}, s.clock(), own))
        return planned, own, before, after

    planned, own, before, after = asyncio.run(scenario())
    assert round(own["eta"] - t0) == 200 and round(planned["eta"] - t0) == 1100
    assert before["eta"] == own["eta"] and abs(after["eta"] - before["eta"]) < 1


def test_held_work_that_runs_after_other_work_is_answered_from_the_plan_beyond_the_own_estimates_cap(tmp_path):
    from hub_ext.snapshot import EXPLAIN_MAX, explanations
    svc = service(tmp_path, estimate_reuse=1e9)
    ends, waiting = line(svc, 1)
    s = svc.sched
    # A chain longer than the cap of own estimates a look makes: each runs after the one before.
    def after(wid):
        return s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 60, "after": [wid]})

    chain = [after(waiting[0].id)]
    for _ in range(EXPLAIN_MAX + 9):
        chain.append(after(chain[-1].id))
    by_hand = after(waiting[0].id)
    s.hold(by_hand.id)
    svc.run_cycle()

    async def scenario():
        await svc.explanation(waiting[0])                  # its own; a plan follows
        if svc.estimates._planning is not None:
            await svc.estimates._planning.future
        return await explanations(svc, s.workloads(states=("pending", "held")))

    es = asyncio.run(scenario())
    assert made(svc) == (1, 1)                             # no estimate of their own: the plan's
    assert [es[w.id]["eta"] for w in chain] == [ends + 600 + 60 * i for i in range(len(chain))]
    assert all(es[w.id]["state"] == "held" and es[w.id]["reason"].startswith("runs after ") for w in chain)
    assert es[chain[3].id]["eta_reason"].startswith("if what it runs after finishes by its declared time limit")
    # Held by hand: out of the plan; its own explanation (no simulation) says why there is no start.
    assert es[by_hand.id]["eta"] is None and "held by hand" in es[by_hand.id]["eta_reason"], es[by_hand.id]
