"""Where every pending workload explains itself: position, ETA and reason.

Position comes from the engine's order (in its queue and overall). The ETA
is a forward simulation with the same engine on a copy of the state
(estimate.py: running work ends at its declared run-time limit, pending work
ahead is admitted as the engine would). Work without a declared limit
makes the ETA unknown, and the explanation says so plainly. Work that would
start on borrowed GPUs (beyond its queue's guarantee) gets its ETA as a lower
bound (``eta_earliest``): whatever other queues are owed and submit meanwhile
goes first, and the simulation cannot know of it.
"""

from __future__ import annotations

from .blockers import CAPACITY, NO_NODE, RESERVED, Blocker
from .estimate import Estimate, Result, Steps, eta_fields, settle
from .holds import hold_until
from .model import HELD, PENDING, Workload
from .resources import GPU, fmt_amount


def positions(order: list[Workload], w: Workload) -> tuple[int, int, int, int]:
    """(position in queue, queue length, overall position, overall length), 1-based,
    in the engine's current order of all pending work."""
    overall = next(i for i, x in enumerate(order) if x is w) + 1
    same = [x for x in order if x.queue == w.queue]
    return same.index(w) + 1, len(same), overall, len(order)


def explain(sched, w: Workload, now: float) -> dict:
    return settle(explain_steps(sched, w, now))


def explain_steps(sched, w: Workload, now: float) -> Steps:
    """``explain`` as a generator of the one estimate it needs (estimate.py), its explanation
    returned: the service runs the estimate away from its event loop."""
    out = {"id": w.id, "state": w.state, "queue": w.queue, "priority": w.priority}
    if w.state == HELD:
        out["reason"] = sched.waits_for(w)
        begins = hold_until(w)
        if begins is not None:      # it joins the line at its begin time: no sooner
            out.update(eta_fields(begins, "at its begin time, at the earliest: it joins the line then", False, now),
                       eta_earliest=True)
        elif w.after:       # work held by a hold alone has no time to join the line at
            out.update((yield from held_eta_steps(sched, w, now)))
        return out
    if w.state != PENDING:
        out["reason"] = w.reason or w.state
        return out
    order = sched.engine.order()
    qpos, qlen, pos, total = positions(order, w)
    out.update(position_in_queue=qpos, queue_length=qlen, position=pos, pending=total)
    result = yield Estimate(sched, w, now, order)
    return waiting_fields(sched, w, now, result, out)


def explain_planned(sched, w: Workload, now: float, result: Result, place: dict | None = None) -> dict:
    """``w``'s explanation from its line plan's ``result`` (line_plan.py): no simulation of its
    own. Pending ``w`` with ``place`` (its ``position``, ``position_in_queue``, ``pending`` and
    ``queue_length`` in this cycle's line); held ``w`` (it runs after other work) as
    ``explain`` says it, its start from when what it runs after ends."""
    out = {"id": w.id, "state": w.state, "queue": w.queue, "priority": w.priority}
    if w.state == HELD:
        eta, why, _, borrows = result
        return {**out, "reason": sched.waits_for(w), **eta_fields(eta, why, borrows, now)}
    return waiting_fields(sched, w, now, result, {**out, **(place or {})})


def waiting_fields(sched, w: Workload, now: float, result: Result, out: dict) -> dict:
    """``out`` with why pending ``w`` waits and when it should start (its estimate's ``result``)."""
    eta, why, first_blocker, borrows = result
    blocker: Blocker | None = sched.last.blockers.get(w.id) if sched.last else None
    if blocker is None or blocker.code in (CAPACITY, NO_NODE):
        # The cycle skips quota checks for work that cannot be placed anyway; a quota
        # rule that holds it back is the more useful thing to say.
        blocker = sched.engine._quota(w) or blocker
    # Work submitted since the last cycle has no verdict of its own yet: the simulation's
    # first cycle (the same engine, now) says what would hold it back.
    blocker = blocker or first_blocker
    if blocker is None:
        out["reason"] = "waiting for the next scheduling cycle"
    else:
        out["reason"] = blocker.text(w, gap=reserved_gap(sched, blocker, now)) + \
            (_borrow_only(sched, w, now) if blocker.code in (CAPACITY, RESERVED) else "")
        out["blocker"] = blocker.to_dict()
    out.update(eta_fields(eta, why, borrows, now))
    if out["eta_earliest"]:
        out["eta_reason"] += (f"; at the earliest: it would start on GPUs beyond queue {w.queue}'s guarantee, "
                              "so work other queues are owed and submit before then goes first")
    return out


def held_eta_steps(sched, w: Workload, now: float, target: Workload | None = None) -> Steps:
    """Held ``w`` that runs after other work: its start estimate from when that ends
    (``eta_fields``), or why there is none. ``target``: ``w`` as a change would make it (a dry run)."""
    chain = sched.dependency_chain(w)
    if isinstance(chain, str):
        return eta_fields(None, chain, False, now)
    eta, why, _, borrows = yield Estimate(sched, target or w, now, held=chain)
    return eta_fields(eta, why, borrows, now)


def reserved_gap(sched, blocker: Blocker, now: float) -> float | None:
    """Seconds until the reservation that holds ``blocker``'s work back starts (the last cycle's;
    None if it is not known)."""
    if blocker.code != RESERVED or sched.last is None:
        return None
    r = next((r for r in sched.last.reservations if r.workload.id == blocker.other), None)
    return None if r is None or r.shadow is None or r.shadow <= now else r.shadow - now


def _borrow_only(sched, w: Workload, now: float) -> str:
    """Why work larger than its queue's guarantee waits longer than its place in line
    suggests (it is ordered after what other queues are owed, may hold no backfill reservation
    (``Engine.may_reserve``) and may be reclaimed)."""
    need = w.total.get(GPU, 0)
    guaranteed = sched.state.tree.guaranteed[w.queue].get(GPU, 0)
    if need <= guaranteed:
        return ""
    cls = sched.state.classes.get(w.priority)
    back = ", and they may take them back" if sched.config.preemption and cls is not None \
        and cls.preemptible else ""
    has = f"is guaranteed {fmt_amount(GPU, guaranteed)}" if guaranteed else "has no guaranteed GPUs"
    held = "" if sched.engine.may_reserve(w, now) else _held_until(sched, w)
    return (f"; it needs {fmt_amount(GPU, need)} GPUs and queue {w.queue} {has}, so it runs only on GPUs "
            f"other queues leave free{held}, after the work they are owed{back}")


def _held_until(sched, w: Workload) -> str:
    """No reservation is held for ``w`` now: say until when (``oversize_reservation_stretch``)."""
    after = sched.engine.reserves_oversize_after(w)
    if after == float("inf"):
        return " (none are held for it)"
    wait = after - w.eligible_since
    span = f"{wait / 60:.0f} min" if wait < 7200 else f"{wait / 3600:.3g} h"
    return f" (none are held for it until it has waited {span})"
