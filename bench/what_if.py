"""What trying a change costs (``computehub update --test-only``, ``PATCH …?dry_run=true``) beside
the position query a waiting job already makes (``GET workloads/{id}``: its place and ETA).

    computehub bench what-if                              # 1,000 nodes, 10,000 pending (~1 minute)
    computehub bench what-if --nodes 100 --pending 1000 --repeat 3

Both are simulations of the line ahead (scheduler/explain.py, scheduler/what_if.py), made in the
service's worker thread (hub_ext/estimates.py), so their cost is the core a user's Try takes
from everyone else (what they cost the event loop: bench/loop_lag.py). In-process, on
bench/scale.py's cluster and workload mix (8 teams, quotas and fair share on), after a few
cycles: for a job near the front of the line, one a quarter down and one halfway, the median
of each way, alternating: the explanation (``explain``), a dry run whose explanation of now is
the one the service keeps (what the service does: one simulation more), and a dry run that
makes both (two).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import long_line  # noqa: E402
from scheduler.explain import explain  # noqa: E402

WAYS = ("position query", "dry run (kept explanation)", "dry run (both simulated)")


def measure(nodes: int, pending: int, repeat: int) -> dict:
    wb = long_line.churned(nodes, pending)
    s, now = wb.sched, wb.now
    order = s.engine.order()
    rows = {}
    for where, at in (("front", min(5, len(order) - 1)), ("a quarter down", len(order) // 4),
                      ("halfway", len(order) // 2)):
        w = order[at]
        kept = explain(s, w, now)
        change = {"time_limit": max(60.0, (w.time_limit or 3600.0) / 2)}
        calls = {WAYS[0]: lambda: explain(s, w, now),
                 WAYS[1]: lambda: s.preview_update(w.id, change, now=now, explained=kept),
                 WAYS[2]: lambda: s.preview_update(w.id, change, now=now)}
        times: dict[str, list[float]] = {k: [] for k in WAYS}
        for _ in range(repeat):
            for way, call in calls.items():
                t0 = time.perf_counter()
                call()
                times[way].append((time.perf_counter() - t0) * 1000)
        rows[where] = {"position": at + 1, **{k: statistics.median(v) for k, v in times.items()}}
        print(f"  {where} (#{at + 1} of {len(order)}): " + ", ".join(
            f"{k} {rows[where][k]:.1f} ms" for k in WAYS), flush=True)
    return {"nodes": nodes, "pending": len(order), "repeat": repeat, "rows": rows}


def report(r: dict) -> str:
    lines = [f"{r['nodes']} nodes, {r['pending']} pending, medians of {r['repeat']}, ms",
             f"{'where':<16}{'#':>7}" + "".join(f"{w:>28}" for w in WAYS) + f"{'dry run / query':>17}"]
    for where, row in r["rows"].items():
        lines.append(f"{where:<16}{row['position']:>7}" + "".join(f"{row[w]:>28.1f}" for w in WAYS)
                     + f"{row[WAYS[1]] / row[WAYS[0]]:>16.2f}×")
    lines.append("(dry run / query: the service's dry run over the position query it already answers)")
    return "\n".join(lines)


def main(argv=None) -> int:
    return long_line.main("what_if", __doc__, measure, report, argv)


if __name__ == "__main__":
    raise SystemExit(main())
