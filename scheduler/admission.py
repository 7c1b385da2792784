"""Why a workload may not start now: the first quota rule it would break, or the
capacity it lacks. Pure functions of the cluster state; the engine calls them per try."""

from __future__ import annotations

from .blockers import (CAPACITY, GUARANTEE_ONLY, LENDING, NO_BORROW, NO_NODE, QUEUE_LIMIT, USER_LIMIT,
                       Blocker)
from .model import Workload
from .resources import CPU, GPU, MEMORY, flavor_key


def quota_blocker(st, w: Workload) -> Blocker | None:
    """The first quota rule ``w`` would break (limits, guarantee, lending), if any."""
    tree, total = st.tree, w.total
    hit = tree.over_limit(w.queue, total)
    if hit:
        q, k = hit
        return Blocker(QUEUE_LIMIT, k, q, tree.usage[q].get(k, 0), tree.limit[q][k], total[k])
    k = tree.over_user_limit(w.queue, w.user, total)
    if k:
        lim = tree.specs[w.queue].limit_for_user(w.user)
        used = tree.user_usage.get((w.queue, w.user), {}).get(k, 0)
        return Blocker(USER_LIMIT, k, w.queue, used, lim[k], total[k])
    k = tree.within_guarantee(w.queue, total)
    if k:
        cls = st.classes[w.priority]
        g = tree.guaranteed[w.queue].get(k, 0)
        used = tree.usage[w.queue].get(k, 0)
        if not (cls.preemptible and cls.may_borrow):
            return Blocker(GUARANTEE_ONLY, k, w.queue, used, g, total[k], cls.name)
        if not tree.specs[w.queue].may_borrow:
            return Blocker(NO_BORROW, k, w.queue, used, g, total[k])
    cap = st.inventory.capacity
    k = tree.lending_blocks(w.queue, total, cap)
    if k:
        return Blocker(LENDING, k, w.queue, tree._topsum.get(k, 0), cap.get(k, 0), total[k])
    return None


def capacity_blocker(inv, w: Workload) -> Blocker:
    """Why no node takes every worker of ``w`` now: capacity, or no node ever could."""
    g = w.request.get(GPU, 0)
    key = flavor_key(w.gpu_model) if w.gpu_model else GPU
    if g:
        what = f"{w.workers} × {g} {w.gpu_model or 'any'} GPU" if w.workers > 1 else \
            f"{g} × {w.gpu_model or 'any'} GPU"
    else:
        key = CPU
        what = f"{w.request.get(CPU, 0) / 1000:g} cores"
    fits_ever = any(
        n.spec.schedulable and n.spec.gpus >= g and n.spec.cpu >= w.request.get(CPU, 0)
        and n.spec.memory >= w.request.get(MEMORY, 0) and inv.model_fits(n.spec, w.gpu_model, g)
        and n.matches(w.node_selector)
        for n in inv.nodes.values())
    code = CAPACITY if fits_ever else NO_NODE
    cap, free = inv.capacity.get(key, 0), inv.free.get(key, 0)
    if g and not w.gpu_model:      # GPUs of models under a queue's quota are not "any GPU"
        for m in inv.managed_models:
            cap -= inv.capacity.get(flavor_key(m), 0)
            free -= inv.free.get(flavor_key(m), 0)
    return Blocker(code, key, "", cap - free, cap, g * w.workers, what)
