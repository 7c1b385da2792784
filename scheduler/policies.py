"""Orderings by service received: shortest-remaining-time (SRTF) and discretised 2D-LAS.

Both are preemptive: a pending workload that sorts strictly ahead of running
work (same or lower class rank) may take its place. They exist so that trace
replay can run the classic reference policies (those Tiresias' simulator
implements) as configurations of the real engine:

* ``srtf``: declared run-time limit minus the seconds already run, shortest
  first. Needs declared limits; work without one sorts last and is never
  preferred over work with one.
* ``las`` (Tiresias-L): attained service = GPUs × seconds already run, summed
  over all runs. Work sits in the first of ``las_thresholds`` (GPU-seconds)
  queues it has not yet passed; lower queues go first, first-come first-served
  within a queue. Needs no durations at all.

"Seconds already run" survives preemption: when a victim is chosen the engine
adds its current run to ``metadata["ran_s"]`` (``charge``). All functions are
pure given (workload, now), so the engine stays deterministic.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from .model import PREEMPTING, STOPPING, Workload
from .resources import GPU

SERVICE_ORDERS = ("srtf", "las")
RAN = "ran_s"            # metadata key: seconds run in earlier (preempted) runs


def ran(w: Workload, now: float) -> float:
    """Seconds ``w`` has run: earlier runs plus the current one if it holds resources."""
    before = float(w.metadata.get(RAN, 0.0))
    # admitted_at is None while pending (requeue clears it); a victim that is still
    # stopping had its current run charged when it was chosen.
    if w.admitted_at is not None and w.state != PREEMPTING:
        before += max(0.0, now - w.admitted_at)
    return before


def charge(w: Workload, now: float) -> None:
    """Record the current run of ``w`` (being preempted) so that its service survives requeueing."""
    if w.admitted_at is not None:
        w.metadata[RAN] = float(w.metadata.get(RAN, 0.0)) + max(0.0, now - w.admitted_at)


def remaining(w: Workload, now: float) -> float:
    """Declared limit minus seconds run (not below 0); infinite without a declared limit."""
    if w.time_limit is None:
        return math.inf
    return max(0.0, w.time_limit - ran(w, now))


def declared_left(w: Workload, now: float, assumed: float) -> float:
    """Declared limit (``assumed`` seconds if none) minus seconds run, not below 0."""
    return max(0.0, (w.time_limit or assumed) - ran(w, now))


def attained(w: Workload, now: float) -> float:
    """GPU-seconds of service ``w`` has had (all workers)."""
    return ran(w, now) * w.request.get(GPU, 0) * w.workers


def expansion(w: Workload, now: float, assumed: float) -> float:
    """Maui's expansion factor (wait + limit) / limit: 1 on arrival, growing faster for short
    declared limits; ``assumed`` seconds stand in for a missing limit."""
    limit = w.time_limit if w.time_limit else assumed
    return (max(0.0, now - w.eligible_since) + limit) / limit


def las_level(w: Workload, now: float, thresholds) -> int:
    """Which LAS queue ``w`` is in: 0 until it passes the first threshold, and so on."""
    return bisect_right(thresholds, attained(w, now))


def primary(order: str, thresholds, now: float):
    """The policy's main sort value of a workload (smaller goes first)."""
    if order == "srtf":
        return lambda w: remaining(w, now)
    if order == "las":
        return lambda w: las_level(w, now, thresholds)
    raise ValueError(f"not a service order: {order!r}")


def order(pending, order: str, thresholds, classes: dict, now: float) -> list[Workload]:
    """Pending work in the policy's order: class rank, then the policy's value, then age."""
    value = primary(order, thresholds, now)
    neg_rank = {name: -c.rank for name, c in classes.items()}
    return sorted(pending, key=lambda w: (neg_rank[w.priority], value(w), w.seq))


def candidates(index, w: Workload, cls, order: str, thresholds, classes: dict, now: float) -> list[Workload]:
    """Running work ``w`` may preempt under the policy: lower class rank, or the same rank
    and a strictly worse policy value. Worst first (largest value), then youngest.

    ``index`` is the engine's ``preemption.VictimIndex`` (preemptible holders past their
    class's ``preempt_after``); whether a victim of another queue may be taken below
    its guarantee is still checked by ``preemption.choose``.
    """
    value = primary(order, thresholds, now)
    mine = value(w)
    out = []
    for q in index.by_queue:
        for key, v in index.live(q):
            if v.state in STOPPING:
                continue
            rank = key[0]
            if rank > cls.rank:
                break       # sorted by rank: the rest rank higher still
            theirs = value(v)
            if rank < cls.rank or theirs > mine:
                out.append(((rank, -theirs, -v.admitted_at, -v.seq), v))
    out.sort(key=lambda t: t[0])
    return [v for _, v in out]


def next_change(w: Workload, now: float, thresholds) -> float | None:
    """When a running ``w`` next moves to a lower LAS queue (for replay wake-ups), if ever."""
    gpus = w.request.get(GPU, 0) * w.workers
    if not gpus:
        return None
    got = attained(w, now)
    for t in thresholds:
        if t > got:
            return now + (t - got) / gpus
    return None


__all__ = ["RAN", "SERVICE_ORDERS", "attained", "candidates", "charge", "declared_left", "expansion", "las_level",
           "next_change", "order", "primary", "ran", "remaining"]
