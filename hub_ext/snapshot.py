"""One user's work at a glance (the event stream, the landing page): each workload's state, and
for waiting work its position, why it waits and when it should start.

A start estimate is a simulation of everything ahead in line (up to a second for work deep in a
long line, in the service's worker thread: estimates.py), so only the first of a job array's waiting tasks gets one (the others wait behind
it), and at most ``EXPLAIN_MAX`` workloads a look; the rest get their position and the last
cycle's reason (``brief``). The admin's Pending page explains its first lines the same way.
"""

from __future__ import annotations

from scheduler.model import HELD, PENDING

EXPLAIN_MAX = 50
KEYS = ("position", "position_in_queue", "pending", "reason", "eta", "eta_seconds", "eta_reason", "eta_earliest")
NOT_ESTIMATED = "not estimated for work this far down the line"


async def snapshot(svc, user: str) -> list[dict]:
    sched = svc.sched
    out, explained, arrays = [], 0, set()
    for w in sched.workloads(user=user):
        d = {"id": w.id, "name": w.name, "state": w.state, "queue": w.queue, "kind": w.kind}
        if w.array:
            d["array"] = w.array
        if w.state == PENDING:
            first = not w.array or w.array["id"] not in arrays
            if w.array:
                arrays.add(w.array["id"])
            if first and explained < EXPLAIN_MAX:
                explained += 1
                e = await svc.explanation(w)
                d.update({k: e.get(k) for k in KEYS})
            else:
                d.update(brief(svc, w))
        else:
            d["placement"] = [a.to_dict() for a in w.placement]
            d["reason"] = sched.waits_for(w) if w.state == HELD else w.reason
        out.append(d)
    return out


def brief(svc, w) -> dict:
    """What a pending workload shows without a simulation: its place in line and the reason the
    last cycle found."""
    sched = svc.sched
    pos = svc.positions.get(w.id)
    b = sched.last.blockers.get(w.id) if sched.last else None
    return {"position": pos[0] if pos else None, "position_in_queue": pos[1] if pos else None,
            "pending": len(sched.state.pending),
            "reason": b.text(w) if b else "waiting for the next scheduling cycle",
            "eta": None, "eta_seconds": None, "eta_reason": NOT_ESTIMATED, "eta_earliest": False}
