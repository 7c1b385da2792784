"""What a change to waiting work would do, before it is made (Slurm's ``sbatch --test-only``,
Kubernetes' ``dryRun``): the workload as ``update`` would make it, refused as ``update`` would
refuse it, and, for work in line, its place and start estimate by the same simulation that
``explain`` makes. Work held only by a hold is estimated as if released now, with the change
and without; work that runs after other work, from when that ends (estimate.py). Nothing is
changed, in memory or in the store.

So a user who waits can ask "with 2 GPUs instead of 4, or a 30-minute limit, when would it
start?" and change it only if the answer is better.
"""

from __future__ import annotations

import copy

from .estimate import Estimate, Steps, eta_fields, settle
from .explain import explain_steps, held_eta_steps, positions
from .model import HELD, PENDING, Workload
from .updates import asks_more

RELEASED = "if released now"


def preview(sched, workload_id: str, changes: dict, now: float, explained: dict | None = None
            ) -> tuple[Workload, dict, dict]:
    """(the workload as the change would make it, its explanation now, its explanation then).
    Any time limit may be tried (only making it needs an admin for more time). ``explained``:
    its explanation now, if the caller keeps one (the service's, made once a cycle): one
    simulation instead of two."""
    return settle(preview_steps(sched, workload_id, changes, now, explained))


def preview_steps(sched, workload_id: str, changes: dict, now: float, explained: dict | None = None) -> Steps:
    """``preview`` as a generator of the estimates it needs (estimate.py): a refused change is
    refused before any."""
    w = sched.get(workload_id)
    fields = sched.checked_update(w, changes, admin=True)
    then = _copy(w)
    for k, v in fields.items():
        setattr(then, k, v)
    if asks_more(w, fields):
        then.eligible_at = now
    if w.state == PENDING:
        before = explained if explained is not None else (yield from explain_steps(sched, w, now))
        return then, before, (yield from standing_steps(sched, then, now))
    if w.state == HELD and not w.after:         # held by hand: as if released now, both ways
        before = yield from standing_steps(sched, _released(w, now), now, RELEASED)
        return then, before, (yield from standing_steps(sched, _released(then, now), now, RELEASED))
    if w.state == HELD:                         # runs after other work: from when that ends, both ways
        before = explained if explained is not None else (yield from explain_steps(sched, w, now))
        return then, before, (yield from held_steps(sched, w, then, now))
    return then, (yield from explain_steps(sched, w, now)), {
        "id": w.id, "state": w.state,
        "reason": "only waiting work (in line, or held) has a start estimate to compare"}


def standing(sched, w: Workload, now: float, note: str = "") -> dict:
    """Where pending ``w`` (a copy, not in the scheduler's line) would stand in it now."""
    return settle(standing_steps(sched, w, now, note))


def standing_steps(sched, w: Workload, now: float, note: str = "") -> Steps:
    order = sched.engine.order({**sched.state.pending, w.id: w})
    qpos, qlen, pos, total = positions(order, w)
    eta, why, blocker, borrows = yield Estimate(sched, w, now, order)
    return {"id": w.id, "state": PENDING, "queue": w.queue, "priority": w.priority,
            "position_in_queue": qpos, "queue_length": qlen, "position": pos, "pending": total,
            **eta_fields(eta, f"{why} ({note})" if note else why, borrows, now),
            "reason": blocker.text(w) if blocker is not None else "nothing would hold it back"}


def held_steps(sched, w: Workload, then: Workload, now: float) -> Steps:
    """When held ``w``, changed to ``then``, would start once what it runs after ends."""
    return {"id": w.id, "state": HELD, "queue": then.queue, "priority": then.priority, "reason": sched.waits_for(w),
            **(yield from held_eta_steps(sched, w, now, then))}


def _copy(w: Workload) -> Workload:
    c = copy.copy(w)
    c.metadata = dict(w.metadata)
    return c


def _released(w: Workload, now: float) -> Workload:
    """``w`` as ``Holds.release`` would put it in line: pending, its wait counted from now."""
    c = _copy(w)
    c.state, c.reason, c.eligible_at = PENDING, "", now
    return c
