"""In what order pending work is considered: the engine's ``order`` (EngineConfig.order).

'priority' (the default): class rank, queues below their guarantee first, fair share in
steps, Maui's expansion factor, then age; then each user's own choice of what goes first
among their work (tops.py). The others ('fifo', 'sjf', and the service orders
of ``policies``) exist for trace replay. Pure given (state, config, fair share, now).
"""

from __future__ import annotations

import math

from . import policies
from .model import TOP, Workload
from .tops import own_first


def pending_order(st, cfg, fs, now: float, first=()) -> list[Workload]:
    """Pending work in admission order: the ids in ``first`` (work whose victims have
    stopped, and work moved to make room for it) go first, oldest first, to the room left
    for them; then by ``cfg.order``."""
    ordered = _by_policy(st, cfg, fs, now)
    front = sorted((st.pending[i] for i in first if i in st.pending), key=lambda w: w.seq)
    if front:
        ids = {w.id for w in front}
        ordered = front + [w for w in ordered if w.id not in ids]
    return ordered


def _by_policy(st, cfg, fs, now: float) -> list[Workload]:
    """'priority': class rank, queues below their guarantee first, fair share (in steps),
    expansion factor, then age (see EngineConfig.order)."""
    pending = st.pending.values()
    if cfg.order == "fifo":
        return sorted(pending, key=lambda w: w.seq)
    if cfg.order == "sjf":
        inf = math.inf
        return sorted(pending, key=lambda w: (w.time_limit if w.time_limit is not None else inf, w.seq))
    if cfg.order in policies.SERVICE_ORDERS:
        return policies.order(pending, cfg.order, cfg.las_thresholds, st.classes, now)
    cap = st.inventory.capacity
    specs = st.tree.specs
    tree = st.tree
    qshare = {q: fs.share(q, cap, specs[q].weight) for q in specs}
    # Queues using less than their guarantee go before the others, so capacity that
    # frees up is not lent out while an owner waits for it.
    over = {q: not any(tree.usage[q].get(k, 0) < v for k, v in tree.guaranteed[q].items()) for q in specs}
    if cfg.expansion_order:
        band = cfg.fair_share_band
        step = {q: math.floor(v / band) if band > 0 else v for q, v in qshare.items()}
    else:
        step = qshare
    # The key's leading part (class rank, over guarantee, fair-share step) as one tuple per
    # queue and class, shared: sorting compares equal leads by identity, in one step (this
    # sort runs over every pending workload every cycle).
    lead = {q: {name: (-c.rank, over[q], step[q]) for name, c in st.classes.items()} for q in specs}
    ushare: dict[str, dict[str, float]] = {q: {} for q in specs}

    def user_share(q: str, user: str) -> float:
        u = ushare[q][user] = fs.share(q + "/" + user, cap, 1.0)
        return u

    if not cfg.expansion_order:
        def key(w: Workload):
            q = w.queue
            u = ushare[q].get(w.user)
            return (lead[q][w.priority], u if u is not None else user_share(q, w.user), w.seq)
    else:
        assumed = cfg.assumed_limit

        def key(w: Workload):
            # policies.expansion, inlined.
            limit = w.time_limit or assumed
            e = w.eligible_at        # Workload.eligible_since, inlined
            waited = now - (w.submitted_at if e is None else e)
            xf = ((waited if waited > 0 else 0.0) + limit) / limit
            q = w.queue
            u = ushare[q].get(w.user)
            return (lead[q][w.priority], -xf, qshare[q], u if u is not None else user_share(q, w.user), w.seq)

    ordered = sorted(pending, key=key)
    topped = getattr(st.pending, "topped", None)        # (a line tried out, what_if.py: a plain dict)
    tops = [w for w in pending if TOP in w.metadata] if topped is None else [st.pending[i] for i in topped]
    return own_first(ordered, tops) if tops else ordered
