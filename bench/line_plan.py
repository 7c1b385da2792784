"""Explaining many waiting workloads: one start estimate each (each a simulation of the line
ahead of its workload: scheduler/estimate.py) against one plan of the whole line that answers
for all of them (scheduler/line_plan.py), side by side, and how far apart their answers are.

    computehub bench line-plan                            # 1,000 nodes, 10,000 pending (~3 minutes)
    computehub bench line-plan --nodes 100 --pending 1000 --repeat 3

In-process, on bench/scale.py's cluster and workload mix (8 teams, quotas and fair share on),
after a few cycles: 20 workloads spread evenly down the line are estimated one by one (what a
user with many jobs waiting, the event stream or the admin's Pending page cost before), and the
plan is made ``--repeat`` times. Reported: the median seconds of one estimate and of the plan,
the total for the 20, how many estimates a plan costs, and for the 20 how each estimate's start
differs from the plan's. The plan is what the engine does (tests/scheduler/test_line_plan.py:
driven forward with running work ending at its limits, the live scheduler starts each where the
plan says); an estimate leaves out work further back that starts first by backfill.

Held work that runs after other work (``HELD`` workloads, each after a different running one)
is timed the same way: its own estimate simulates the whole line of now (it joins behind it),
against the plan made with all held work in it, beside the plan without.
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
from scheduler.estimate import Estimate  # noqa: E402
from scheduler.line_plan import LinePlan  # noqa: E402

PICKS = 20
HELD = 3


def _timed(make) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = make().run()
    return time.perf_counter() - t0, out


def measure(nodes: int, pending: int, repeat: int) -> dict:
    wb = long_line.churned(nodes, pending)
    s, now = wb.sched, wb.now
    order = s.engine.order()
    n = len(order)
    picks = [order[i * (n - 1) // (PICKS - 1)] for i in range(PICKS)]
    own = [_timed(lambda w=w: Estimate(s, w, now, order)) for w in picks]
    held = _held_after_running(s, now)
    own_held = [_timed(lambda w=w: Estimate(s, w, now, order, held=s.dependency_chain(w))) for w in held]
    plans, plans_held = [], []
    for _ in range(repeat):             # alternating: the plan without held work, then with it
        plans.append(_timed(lambda: LinePlan(s, now, order)))
        plans_held.append(_timed(lambda: LinePlan(s, now, order, s.held_lines())))
    with_held = plans_held[0][1]
    starts = plans[0][1]
    rows = []
    for w, (took, result) in zip(picks, own):
        mine, planned = result[0], starts[w.id][0]
        rows.append({"position": order.index(w) + 1, "own_s": took, "own_eta_h": _hours(mine, now),
                     "plan_eta_h": _hours(planned, now)})
    diffs = [r["plan_eta_h"] - r["own_eta_h"] for r in rows
             if r["own_eta_h"] is not None and r["plan_eta_h"] is not None]
    own_total = sum(t for t, _ in own)
    plan_s = statistics.median(t for t, _ in plans)
    return {"nodes": nodes, "pending": n, "repeat": repeat, "picks": rows,
            "own_median_s": statistics.median(t for t, _ in own), "own_total_s": own_total,
            "plan_median_s": plan_s, "plan_runs_s": [t for t, _ in plans],
            "estimates_per_plan": plan_s / (own_total / len(own)),
            "estimated_by_plan": sum(r[0] is not None for r in starts.values()),
            "later_in_plan": sum(d > 1e-9 for d in diffs), "earlier_in_plan": sum(d < -1e-9 for d in diffs),
            "compared": len(diffs), "median_gap_h": statistics.median(abs(d) for d in diffs) if diffs else None,
            "max_gap_h": max((abs(d) for d in diffs), default=None),
            "held": [{"own_s": took, "own_eta_h": _hours(result[0], now), "plan_eta_h": _hours(with_held[w.id][0], now)}
                     for w, (took, result) in zip(held, own_held)],
            "held_own_total_s": sum(t for t, _ in own_held),
            "plan_with_held_median_s": statistics.median(t for t, _ in plans_held),
            "plan_with_held_runs_s": [t for t, _ in plans_held]}


def _held_after_running(s, now: float) -> list:
    """``HELD`` one-GPU workloads, each to run after a different running one (spread over them)."""
    running = sorted((w for w in s.state.holding.values() if w.time_limit), key=lambda w: w.seq)
    after = [running[i * (len(running) - 1) // max(1, HELD - 1)] for i in range(HELD)]
    return [s.submit({"user": r.user, "queue": r.queue, "kind": r.kind, "resources": {"gpu": 1},
                      "time_limit": 3600, "after": [r.id]}, now=now) for r in after]


def _hours(t, now):
    return None if t is None else (t - now) / 3600


def report(r: dict) -> str:
    fmt = lambda h: "—" if h is None else f"{h:.2f}"  # noqa: E731
    lines = [f"{r['nodes']} nodes, {r['pending']} pending; {PICKS} workloads spread down the line, "
             f"the plan made {r['repeat']} time(s)",
             f"{'position':>9}{'own estimate s':>16}{'its start, h':>14}{'plan start, h':>15}"]
    for p in r["picks"]:
        lines.append(f"{p['position']:>9}{p['own_s']:>16.3f}{fmt(p['own_eta_h']):>14}{fmt(p['plan_eta_h']):>15}")
    lines += [
        f"one own estimate: median {r['own_median_s']:.3f} s; the {PICKS}: {r['own_total_s']:.2f} s in all",
        f"one plan of the whole line: median {r['plan_median_s']:.2f} s (runs: "
        + ", ".join(f"{t:.2f}" for t in r["plan_runs_s"]) + f"), {r['estimated_by_plan']} of {r['pending']} "
        "given a start",
        f"the plan costs as much as {r['estimates_per_plan']:.1f} own estimates (their mean); "
        f"{PICKS} own / plan: {r['own_total_s'] / r['plan_median_s']:.2f}×",
        f"of {r['compared']} compared, the plan starts {r['later_in_plan']} later and {r['earlier_in_plan']} "
        f"earlier than their own estimate; median gap {fmt(r['median_gap_h'])} h, largest {fmt(r['max_gap_h'])} h"]
    held = r["held"]
    lines += [f"{len(held)} held workloads, each after a running one: own estimates "
              + ", ".join(f"{h['own_s']:.2f} s (start {fmt(h['own_eta_h'])} h; plan {fmt(h['plan_eta_h'])} h)"
                          for h in held)
              + f", {r['held_own_total_s']:.2f} s in all",
              f"the plan with them: median {r['plan_with_held_median_s']:.2f} s against {r['plan_median_s']:.2f} s "
              f"without ({r['plan_with_held_median_s'] / r['plan_median_s']:.2f}×)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    return long_line.main("line_plan", __doc__, measure, report, argv)


if __name__ == "__main__":
    raise SystemExit(main())
