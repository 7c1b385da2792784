"""One user's work at a glance (the event stream, the landing page): each workload's state, and
for waiting work its position, why it waits and when it should start.

Waiting work that was in line at the last cycle gets its start estimate from the line's plan
(one simulation of the whole line for all of it: estimates.py). Other work (new in line since,
or held work that runs after other work: from when that ends) needs a simulation of its own,
of everything ahead (up to a second for work deep in a long line, in the service's worker
thread), so only the first of a job array's tasks waiting in a state gets one (the others wait
behind it), and at most ``EXPLAIN_MAX`` workloads a look; the rest get their position and the
last cycle's reason (``brief``). Held work with a begin time gets that time, with no
simulation. The admin's Pending page explains its lines the same way.
"""

from __future__ import annotations

from scheduler.holds import hold_until
from scheduler.model import HELD, PENDING

EXPLAIN_MAX = 50
KEYS = ("position", "position_in_queue", "pending", "reason", "eta", "eta_seconds", "eta_reason", "eta_earliest")
NOT_ESTIMATED = "not estimated for work this far down the line"


async def snapshot(svc, user: str) -> list[dict]:
    sched = svc.sched
    items = sched.workloads(user=user)
    said = await explanations(svc, items)
    out = []
    for w in items:
        d = {"id": w.id, "name": w.name, "state": w.state, "queue": w.queue, "kind": w.kind}
        if w.array:
            d["array"] = w.array
        e = said.get(w.id)
        if e is not None:
            d.update({k: e.get(k) for k in KEYS if w.state == PENDING or k in e})
            if w.state == HELD:
                d["placement"] = []
        else:
            d["placement"] = [a.to_dict() for a in w.placement]
            d["reason"] = sched.waits_for(w) if w.state == HELD else w.reason
        out.append(d)
    return out


async def explanations(svc, workloads) -> dict[str, dict]:
    """The explanations of the waiting ones among ``workloads`` (in their order), by id: from the
    line plan (pending work, and held work that runs after other work); else (new in line or
    held since the plan, or held with a begin time) a simulation of its own for the first of a
    job array's tasks waiting in a state, for at most ``EXPLAIN_MAX``; else, for pending work,
    ``brief``. Held work beyond them gets none (its reason is what keeps it back)."""
    out, explained, rows = {}, 0, set()
    for w in workloads:
        # Held work that runs after other work is estimated from when that ends (estimate.py);
        # held work with a begin time, from then.
        estimated = w.state == PENDING or (w.state == HELD and (bool(w.after) or hold_until(w) is not None))
        first = estimated and (not w.array or (w.array["id"], w.state) not in rows)
        if w.array and estimated:
            rows.add((w.array["id"], w.state))
        planned = await svc.estimates.planned(w) if w.state in (PENDING, HELD) else None
        if planned is not None:
            out[w.id] = planned
        elif first and explained < EXPLAIN_MAX:
            explained += 1
            out[w.id] = await svc.estimates.unplanned(w)
        elif w.state == PENDING:
            out[w.id] = brief(svc, w)
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
