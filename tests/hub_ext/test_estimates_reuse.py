"""How long the service keeps an explanation (hub_ext/estimates.py), driven in-process on a real
SQLite file: made again each cycle by default for what costs little, kept for ``estimate_reuse``
times what it cost otherwise (its seconds to the start counted again from now), and made again
at once when the workload's state has changed. (Through the hub and proxy: test_estimates_hub.)"""

import asyncio
import time

from hub_ext.app import ComputeHubService

ESTIMATES = "computehub_start_estimate_duration_seconds_count"
PLANS = "computehub_line_plan_duration_seconds_count"


def service(tmp_path, **kw):
    svc = ComputeHubService(data_dir=str(tmp_path), service_prefix="/services/computehub/",
                            nodes=[{"name": "n0", "gpus": 1}], initial_queues=[{"name": "a"}], **kw)
    svc.initialize([])
    return svc


def line(svc):
    """One job runs for an hour on the only GPU; another waits for it."""
    s = svc.sched
    running = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 3600})
    svc.run_cycle()
    waiting = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 600})
    svc.run_cycle()
    return running, waiting


def made(svc) -> float:
    return svc.metrics.registry.get_sample_value(ESTIMATES) or 0.0


def test_an_explanation_is_made_again_each_cycle_when_reuse_is_off(tmp_path):
    svc = service(tmp_path, estimate_reuse=0.0)
    running, waiting = line(svc)
    ends = svc.sched.get(running.id).admitted_at + 3600

    async def settled():
        """Simulations made (its own estimates and line plans), once the plan being made is done."""
        if svc.estimates._planning is not None:
            await svc.estimates._planning.future
        return made(svc) + (svc.metrics.registry.get_sample_value(PLANS) or 0.0)

    async def ask_twice():
        first = await svc.explanation(waiting)
        again = await svc.explanation(waiting)            # the same cycle: the same one
        n = await settled()
        assert (await svc.explanation(waiting))["eta"] == again["eta"] and await settled() == n
        svc.run_cycle()
        return first, again, await svc.explanation(waiting), n, await settled()

    first, again, next_cycle, n, n_next = asyncio.run(ask_twice())
    assert first["eta"] == ends and again["eta"] == ends and next_cycle["eta"] == ends
    assert made(svc) == 2 and n_next == n + 2             # its own and a plan of the line, again


def test_a_costly_explanation_is_kept_across_cycles_until_its_workload_changes(tmp_path):
    svc = service(tmp_path, estimate_reuse=1e9)          # whatever it cost, kept
    running, waiting = line(svc)
    ends = svc.sched.get(running.id).admitted_at + 3600

    async def asks():
        first = await svc.explanation(waiting)
        await asyncio.sleep(0.2)
        svc.run_cycle()
        kept = await svc.explanation(waiting)
        svc.sched.mark_finished(running.id)               # its GPU is free: the waiting one starts
        svc.run_cycle()
        return first, kept, await svc.explanation(svc.sched.get(waiting.id))

    first, kept, started = asyncio.run(asks())
    assert first["eta"] == ends and kept["eta"] == ends
    # Not made again, but its seconds to the start count from when it is asked.
    assert first["eta_seconds"] - kept["eta_seconds"] >= 0.2 and abs(kept["eta_seconds"] - (ends - time.time())) < 1
    assert made(svc) == 1
    assert started["state"] == "admitted" and "eta" not in started    # its state changed: made again


def test_a_kept_explanation_tells_the_place_in_line_of_the_cycle_it_is_asked_in(tmp_path):
    svc = service(tmp_path, estimate_reuse=1e9)
    running, ahead = line(svc)
    s = svc.sched
    behind = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 600})
    svc.run_cycle()

    async def asks():
        first = await svc.explanation(behind)
        s.cancel(ahead.id)                                # the one ahead leaves the line
        svc.run_cycle()
        return first, await svc.explanation(s.get(behind.id))

    first, kept = asyncio.run(asks())
    assert made(svc) == 1                                 # kept, not made again
    assert (first["position"], first["position_in_queue"], first["pending"], first["queue_length"]) == (2, 2, 2, 2)
    assert (kept["position"], kept["position_in_queue"], kept["pending"], kept["queue_length"]) == (1, 1, 1, 1)
    assert kept["eta"] == first["eta"]                    # the estimate itself is the one kept
