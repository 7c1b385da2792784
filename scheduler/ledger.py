"""Where usage and cost are counted: allocated GPU-seconds by workload, user, queue, flavor or
job array.

Allocation intervals come from the store; a query clips them to its window,
so "GPU-hours of team-vision last week" counts only what fell in the week.
"""

from __future__ import annotations

from .model import Allocation

GROUPS = ("workload", "user", "queue", "flavor", "array")
OWNED = ("workload", "array")       # groupings whose rows also say whose they are and their queue


def usage(allocations: list[Allocation], start: float, end: float, by: str = "user",
          prices: dict[str, float] | None = None) -> list[dict]:
    """Rows ``{by: key, gpu_seconds, gpu_hours, cost}`` for [start, end), largest first (by
    workload or by job array, with its ``user`` and ``queue`` too; by array, work not in an
    array is left out).

    ``prices`` maps a flavor (``a100``, or ``any`` for GPUs of no stated model)
    to a price per GPU-hour; flavors without a price cost 0.
    """
    if by not in GROUPS:
        raise ValueError(f"group by one of {', '.join(GROUPS)}")
    prices = prices or {}
    rows: dict[str, dict] = {}
    for a in allocations:
        if not a.gpus or (by == "array" and a.array_id is None):
            continue
        lo = max(a.start, start)
        hi = min(a.end if a.end is not None else end, end)
        if hi <= lo:
            continue
        secs = (hi - lo) * a.gpus
        key = {"workload": a.workload_id, "user": a.user, "queue": a.queue, "flavor": a.flavor,
               "array": a.array_id}[by]
        r = rows.setdefault(key, {by: key, "gpu_seconds": 0.0, "cost": 0.0})
        if by in OWNED:                    # whose, and where: a bare id says little
            r.setdefault("user", a.user)
            r.setdefault("queue", a.queue)
        r["gpu_seconds"] += secs
        r["cost"] += secs / 3600.0 * prices.get(a.flavor, 0.0)
    out = sorted(rows.values(), key=lambda r: (-r["gpu_seconds"], r[by]))
    for r in out:
        r["gpu_hours"] = r["gpu_seconds"] / 3600.0
        r["cost"] = round(r["cost"], 6)
    return out
