"""What users' own order (``computehub top``, scheduler/tops.py) costs the order every cycle makes.

    computehub bench own-order                            # 1,000 nodes, 10,000 pending (~1 minute)
    computehub bench own-order --nodes 100 --pending 1000 --repeat 3

Work a user put first swaps places with that user's other work of its queue and class, in a
pass over the line made only while such work waits. In-process, on bench/scale.py's cluster
and workload mix (8 teams, quotas and fair share on) after a few cycles of churn: the median
time of the engine's order of the whole line, alternating, with nothing put first, with one
user's 20 jobs put first, and with one job in a hundred put first (every user's).
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
from scheduler.model import TOP  # noqa: E402

WAYS = ("nothing put first", "one user's 20 put first", "1 in 100 put first")


def _put_first(s, ids: list[str]) -> None:
    """Exactly ``ids`` put first (tops.py), in that order, the others not."""
    for w in list(s.state.pending.values()):
        if TOP in w.metadata:
            w.metadata = {k: v for k, v in w.metadata.items() if k != TOP}
            s.state.pending[w.id] = w
    for wid in reversed(ids):
        s.top(wid, actor="bench")


def measure(nodes: int, pending: int, repeat: int) -> dict:
    wb = long_line.churned(nodes, pending)
    s = wb.sched
    order = s.engine.order()
    user = order[len(order) // 2].user
    chosen = {WAYS[0]: [], WAYS[1]: [w.id for w in order if w.user == user][-20:],
              WAYS[2]: [w.id for w in order[::100]]}
    times: dict[str, list[float]] = {k: [] for k in WAYS}
    for _ in range(repeat):
        for way, ids in chosen.items():
            _put_first(s, ids)
            t0 = time.perf_counter()
            s.engine.order()
            times[way].append((time.perf_counter() - t0) * 1000)
    rows = {way: {"put_first": len(chosen[way]), "ms": statistics.median(v)} for way, v in times.items()}
    for way, row in rows.items():
        print(f"  {way}: {row['ms']:.1f} ms", flush=True)
    return {"nodes": nodes, "pending": len(order), "repeat": repeat, "rows": rows}


def report(r: dict) -> str:
    base = r["rows"][WAYS[0]]["ms"]
    lines = [f"{r['nodes']} nodes, {r['pending']} pending, the order of the whole line, medians of {r['repeat']}",
             f"{'':<26}{'put first':>10}{'ms':>9}{'/ none':>9}"]
    for way, row in r["rows"].items():
        lines.append(f"{way:<26}{row['put_first']:>10}{row['ms']:>9.1f}{row['ms'] / base:>8.2f}×")
    return "\n".join(lines)


def main(argv=None) -> int:
    return long_line.main("own_order", __doc__, measure, report, argv)


if __name__ == "__main__":
    raise SystemExit(main())
