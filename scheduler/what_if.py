"""What a change to waiting work would do, before it is made (Slurm's ``sbatch --test-only``,
Kubernetes' ``dryRun``): the workload as ``update`` would make it, refused as ``update`` would
refuse it, and, for work in line, its place and start estimate by the same simulation that
``explain`` makes. Nothing is changed, in memory or in the store.

So a user who waits can ask "with 2 GPUs instead of 4, or a 30-minute limit, when would it
start?" and change it only if the answer is better.
"""

from __future__ import annotations

import copy
from .explain import estimate_start, explain, positions
from .model import PENDING, Workload
from .updates import asks_more


def preview(sched, workload_id: str, changes: dict, now: float) -> tuple[Workload, dict, dict]:
    """(the workload as the change would make it, its explanation now, its explanation then).
    Any time limit may be tried (only making it needs an admin for more time)."""
    w = sched.get(workload_id)
    fields = sched.checked_update(w, changes, admin=True)
    then = copy.copy(w)
    then.metadata = dict(w.metadata)
    for k, v in fields.items():
        setattr(then, k, v)
    if asks_more(w, fields):
        then.eligible_at = now
    before = explain(sched, w, now)
    if w.state != PENDING:
        return then, before, {"id": w.id, "state": w.state,
                              "reason": "only work in line (pending) has a place and a start estimate to compare"}
    order = sched.engine.order({**sched.state.pending, w.id: then})
    qpos, qlen, pos, total = positions(order, then)
    eta, why, blocker, borrows = estimate_start(sched, then, now, order)
    after = {"id": w.id, "state": PENDING, "queue": then.queue, "priority": then.priority,
             "position_in_queue": qpos, "queue_length": qlen, "position": pos, "pending": total,
             "eta": eta, "eta_seconds": None if eta is None else max(0.0, eta - now),
             "eta_earliest": bool(borrows and eta is not None and eta > now), "eta_reason": why,
             "reason": blocker.text(then) if blocker is not None else "nothing would hold it back"}
    return then, before, after
