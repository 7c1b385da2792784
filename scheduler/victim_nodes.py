"""Which nodes to clear for a pending workload, with arithmetic only (``preemption.choose``).

For a single-node workload, the node that needs the fewest (then most preferred) victims;
for a gang, the whole nodes it lacks, the cheapest first. Both count what each borrowing
queue may give up before it is back at its guarantee (reclaim stops there), so a node
counted as clearable really is. Nothing is changed here: the caller releases the victims
returned, in preference order, and gives back any that turn out unnecessary.
"""

from __future__ import annotations

import math

from .model import Workload
from .resources import CPU, GPU, MEMORY


def usable(n, w: Workload) -> bool:
    """May ``w`` run on node ``n`` at all (schedulable, its GPU model, its node selector)?
    GPU work asking for any model does not go to a model under a queue's quota."""
    spec = n.spec
    return spec.schedulable and not (w.gpu_model and spec.gpu_model != w.gpu_model) \
        and not (n.managed and not w.gpu_model and w.request.get(GPU, 0)) \
        and not (w.node_selector and not n.matches(w.node_selector))


def one_node(state, w: Workload, cands: list[Workload]) -> list[Workload] | None:
    """The victims of the node that needs the fewest, the most preferred first: per node,
    its candidates in preference order until ``w`` fits there. A node whose victims include
    a gang (work on other nodes too) comes after every node cleared without stopping one:
    stopping a gang frees GPUs elsewhere that ``w`` does not need (in trace replay a 1-GPU
    job stopped a 64-GPU gang), and it loses the progress of all its workers."""
    inv = state.inventory
    g, cpu, mem = w.request.get(GPU, 0), w.request.get(CPU, 0), w.request.get(MEMORY, 0)
    # Fast path, the common case: the first node where the most preferred one-node candidate
    # alone makes room scores (False, 1, [its rank]), which nothing can beat; candidates come
    # in preference order.
    seen: set[str] = set()
    for v in cands:
        if v.workers > 1:
            continue
        for a in v.placement:
            if a.node in seen:
                continue
            seen.add(a.node)
            n = inv.nodes[a.node]
            if not usable(n, w):
                continue
            per = sum(1 for b in v.placement if b.node == a.node)
            if len(n.free_gpus) >= g and n.free_cpu >= cpu and n.free_memory >= mem:
                continue    # fits without a victim: not a node this search is for
            if len(n.free_gpus) + sum(len(b.gpus) for b in v.placement if b.node == a.node) >= g \
                    and n.free_cpu + v.request.get(CPU, 0) * per >= cpu \
                    and n.free_memory + v.request.get(MEMORY, 0) * per >= mem:
                return [v]
    rank = {v.id: i for i, v in enumerate(cands)}
    groups: dict[str, list[Workload]] = {}
    for v in cands:
        for a in v.placement:
            grp = groups.setdefault(a.node, [])
            if not grp or grp[-1] is not v:
                grp.append(v)
    # What other queues may lose before they are back at their guarantee (reclaim stops
    # there: _greedy skips the rest), so that a node counted as clearable really is.
    tree = state.tree
    spare = {q: tree.usage[q].get(GPU, 0) - tree.guaranteed[q].get(GPU, 0)
             for q in {v.queue for v in cands if v.queue != w.queue}}
    best = None
    for name, grp in groups.items():
        n = inv.nodes[name]
        if not usable(n, w):
            continue
        fg, fc, fm = len(n.free_gpus), n.free_cpu, n.free_memory
        chosen = []
        taken: dict[str, int] = {}
        for v in grp:
            if fg >= g and fc >= cpu and fm >= mem:
                break
            if v.queue != w.queue:
                if spare[v.queue] - taken.get(v.queue, 0) <= 0:
                    continue
                taken[v.queue] = taken.get(v.queue, 0) + v.request.get(GPU, 0) * v.workers
            chosen.append(v)
            fg += sum(len(a.gpus) for a in v.placement if a.node == name)
            per = sum(1 for a in v.placement if a.node == name)
            fc += v.request.get(CPU, 0) * per
            fm += v.request.get(MEMORY, 0) * per
        if fg >= g and fc >= cpu and fm >= mem and chosen:
            score = (any(v.workers > 1 for v in chosen), len(chosen), sorted(rank[v.id] for v in chosen))
            if best is None or score < best[0]:
                best = (score, chosen)
    return None if best is None else best[1]


def whole_nodes(state, w: Workload, cands: list[Workload]) -> list[Workload] | None:
    """Victims that give the gang ``w`` the nodes it lacks, in preference order, or None: per
    node, its one-worker candidates in preference order until one worker fits there; then the
    nodes needing the fewest (then most preferred) victims, as long as each borrowing queue
    may still give up what they take."""
    inv = state.inventory
    g, cpu, mem = w.request.get(GPU, 0), w.request.get(CPU, 0), w.request.get(MEMORY, 0)
    if g == 0:
        return None

    def workers_on(fg, fc, fm) -> int:
        return min(fg // g, fc // cpu if cpu else math.inf, fm // mem if mem else math.inf)

    slots = sum(workers_on(len(n.free_gpus), n.free_cpu, n.free_memory)
                for n in inv.with_free(g, w.gpu_model) if usable(n, w))
    lacking = w.workers - slots
    if lacking <= 0:
        return None
    rank = {v.id: i for i, v in enumerate(cands)}
    groups: dict[str, list[Workload]] = {}
    for v in cands:
        if v.workers == 1:
            groups.setdefault(v.placement[0].node, []).append(v)
    tree = state.tree
    spare = {q: tree.usage[q].get(GPU, 0) - tree.guaranteed[q].get(GPU, 0)
             for q in {v.queue for v in cands if v.queue != w.queue}}
    options = []
    for name, grp in groups.items():
        n = inv.nodes[name]
        fg, fc, fm = len(n.free_gpus), n.free_cpu, n.free_memory
        if not usable(n, w) or workers_on(fg, fc, fm) > 0:
            continue
        chosen, taken = [], {}
        for v in grp:
            if workers_on(fg, fc, fm) > 0:
                break
            if v.queue != w.queue:
                if spare[v.queue] - taken.get(v.queue, 0) <= 0:
                    continue
                taken[v.queue] = taken.get(v.queue, 0) + v.request.get(GPU, 0)
            chosen.append(v)
            fg += v.request.get(GPU, 0)
            fc += v.request.get(CPU, 0)
            fm += v.request.get(MEMORY, 0)
        if workers_on(fg, fc, fm) > 0:
            options.append(((len(chosen), sorted(rank[v.id] for v in chosen)), name, chosen))
    options.sort(key=lambda o: o[:2])
    picked: list[Workload] = []
    taken: dict[str, int] = {}
    for _, _, chosen in options:
        after = dict(taken)
        for v in chosen:        # as reclaim takes them: each while its queue still has spare
            if v.queue != w.queue:
                if spare[v.queue] - after.get(v.queue, 0) <= 0:
                    break
                after[v.queue] = after.get(v.queue, 0) + v.request.get(GPU, 0)
        else:
            taken = after
            picked += chosen
            lacking -= 1
            if lacking == 0:
                return sorted(picked, key=lambda v: rank[v.id])
    return None
