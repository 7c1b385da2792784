"""What a position query deep in a long line costs everyone else: how long the service's event
loop stalls while it is answered, with the start estimate simulated on the loop (before), in
the service's worker thread, and read from the line plan the service keeps (now:
hub_ext/estimates.py, made once before the timing), side by side.

    computehub bench loop-lag                             # 1,000 nodes, 10,000 pending (~1 minute)
    computehub bench loop-lag --nodes 100 --pending 1000 --repeat 3

In-process, on bench/scale.py's cluster and workload mix (8 teams, quotas and fair share on),
after a few cycles: for a job near the front, one a quarter down and one halfway, its
explanation (``GET workloads/{id}``: position, reason, ETA) is made each way, alternating,
while a ticker on the same loop wakes every 5 ms, as the loop's other work would (a submission,
the spawner's long poll). Reported, medians over the runs: the query's own time, the loop's
longest stall (the worst lateness of a tick) and ticks per second during the query.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from prometheus_client import CollectorRegistry, Histogram  # noqa: E402
import long_line  # noqa: E402
from hub_ext.estimates import Estimates  # noqa: E402
from scheduler.explain import explain, explain_steps  # noqa: E402

TICK = 0.005
WAYS = ("on the loop (before)", "worker thread", "line plan (now)")


async def _timed(query) -> dict:
    """Run ``query`` beside a 5 ms ticker: its time, the longest stall and ticks per second."""
    loop, done = asyncio.get_running_loop(), asyncio.Event()
    lateness: list[float] = []

    async def ticker():
        while not done.is_set():
            t = loop.time()
            await asyncio.sleep(TICK)
            lateness.append(loop.time() - t - TICK)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(TICK * 2)
    t0 = time.perf_counter()
    await query()
    took = time.perf_counter() - t0
    done.set()
    await tick
    return {"query_ms": took * 1000, "stall_ms": max(lateness) * 1000, "ticks_per_s": len(lateness) / took}


async def _measure(wb, repeat: int) -> dict:
    s, now = wb.sched, wb.now
    order = s.engine.order()
    registry = CollectorRegistry()
    service = SimpleNamespace(sched=s, cycles=0, estimate_reuse=1e9, line_order=[w.id for w in order],
                              metrics=SimpleNamespace(estimate=Histogram("estimate_seconds", "", registry=registry),
                                                      line_plan=Histogram("plan_seconds", "", registry=registry)))
    per_queue: dict[str, int] = {}
    service.positions = {}
    for n, w in enumerate(order, 1):
        per_queue[w.queue] = per_queue.get(w.queue, 0) + 1
        service.positions[w.id] = (n, per_queue[w.queue])
    service.line_lengths = (len(order), per_queue)
    estimates = Estimates(service)      # the service's own, as it runs there (its worker thread)
    rows = {}
    try:
        estimates._start_plan()         # made once, before any timing: the service keeps one while people ask
        await estimates._planning.future
        for where, at in (("front", min(5, len(order) - 1)), ("a quarter down", len(order) // 4),
                          ("halfway", len(order) // 2)):
            w = order[at]

            async def on_loop():
                explain(s, w, now)

            async def off_loop():
                await estimates.settle(explain_steps(s, w, now))

            async def planned():
                assert await estimates.planned(w) is not None

            runs: dict[str, list[dict]] = {way: [] for way in WAYS}
            for _ in range(repeat):
                for way, query in zip(WAYS, (on_loop, off_loop, planned)):
                    runs[way].append(await _timed(query))
            rows[where] = {"position": at + 1, **{way: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                                                  for way, rs in runs.items()}}
            print(f"  {where} (#{at + 1} of {len(order)}): " + "; ".join(
                f"{way}: query {rows[where][way]['query_ms']:.0f} ms, stall {rows[where][way]['stall_ms']:.1f} ms"
                for way in WAYS), flush=True)
    finally:
        estimates.close()
    return rows


def measure(nodes: int, pending: int, repeat: int) -> dict:
    wb = long_line.churned(nodes, pending)
    rows = asyncio.run(_measure(wb, repeat))
    return {"nodes": nodes, "pending": len(wb.sched.state.pending), "repeat": repeat, "rows": rows}


def report(r: dict) -> str:
    lines = [f"{r['nodes']} nodes, {r['pending']} pending, medians of {r['repeat']}; a 5 ms ticker on the loop",
             f"{'where':<16}{'#':>7}  {'way':<22}{'query ms':>10}{'longest stall ms':>18}{'ticks/s':>9}"]
    for where, row in r["rows"].items():
        for way in WAYS:
            m = row[way]
            lines.append(f"{where:<16}{row['position']:>7}  {way:<22}{m['query_ms']:>10.1f}{m['stall_ms']:>18.1f}"
                         f"{m['ticks_per_s']:>9.0f}")
        before = row[WAYS[0]]
        for way in WAYS[1:]:
            m = row[way]
            lines.append(f"{'':<25}{way}: longest stall / before {m['stall_ms'] / max(before['stall_ms'], 1e-9):.3f}×; "
                         f"query / before {m['query_ms'] / before['query_ms']:.4f}×")
    return "\n".join(lines)


def main(argv=None) -> int:
    return long_line.main("loop_lag", __doc__, measure, report, argv)


if __name__ == "__main__":
    raise SystemExit(main())
