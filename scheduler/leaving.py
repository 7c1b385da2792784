"""Work being preempted that still holds its resources, and who must wait for it.

In the live service a victim keeps its GPUs until its launcher reports it has
stopped. A cycle treats such work as gone so the preemptor (and anyone else)
can be placed on what it will free; ``Leaving`` then tells which placements
rely on that capacity or quota, so they are only nominated, not started.
"""

from __future__ import annotations

from .model import Workload
from .resources import CPU, MEMORY, add_into


class Leaving:
    """What preempted work still holds, per node, while the cycle treats it as gone."""

    def __init__(self):
        self.workloads: list[Workload] = []
        self.gpus: dict[str, set[int]] = {}
        self.cpu: dict[str, int] = {}
        self.memory: dict[str, int] = {}
        self.ids_on: dict[str, set[str]] = {}     # node -> leaving workloads with a worker there
        # Totals of leaving work per queue of its chain, per (leaf, user), and counts per
        # leaf: every admission asks, so they are summed once, as workloads arrive.
        self._summed = 0
        self._by_queue: dict[str, dict[str, int]] = {}
        self._by_user: dict[tuple[str, str], dict[str, int]] = {}
        self._count: dict[str, int] = {}

    def add(self, v: Workload) -> None:
        self.workloads.append(v)
        for a in v.placement:
            self.gpus.setdefault(a.node, set()).update(a.gpus)
            self.cpu[a.node] = self.cpu.get(a.node, 0) + v.request.get(CPU, 0)
            self.memory[a.node] = self.memory.get(a.node, 0) + v.request.get(MEMORY, 0)
            self.ids_on.setdefault(a.node, set()).add(v.id)

    def quota_relied_on(self, state, w: Workload) -> int:
        """How many leaving workloads must stop before ``w`` (already charged) is within
        its queue limits, user limit and, for work that may not borrow, its guarantee."""
        if not self.workloads:
            return 0
        tree = state.tree
        self._sum(tree)
        chain = tree.chain[w.queue]
        # leaving work shares a queue with w's chain (its own chain meets w's)
        mine = sum(c for q, c in self._count.items() if any(x in chain for x in tree.chain[q]))
        if not mine:
            return 0
        gone = self._by_queue
        gone_user = self._by_user.get((w.queue, w.user), {})
        cls = state.classes[w.priority]
        for q in chain:
            u, g = tree.usage[q], gone.get(q, {})
            for k, lim in tree.limit[q].items():
                if u.get(k, 0) + g.get(k, 0) > lim and g.get(k):
                    return mine
        ulim = tree.specs[w.queue].limit_for_user(w.user)
        uu = tree.user_usage.get((w.queue, w.user), {})
        for k, lim in ulim.items():
            if uu.get(k, 0) + gone_user.get(k, 0) > lim and gone_user.get(k):
                return mine
        if not (cls.preemptible and cls.may_borrow):
            u, g, gov = tree.usage[w.queue], gone.get(w.queue, {}), tree.governed[w.queue]
            for k, v in g.items():
                if k in gov and v and u.get(k, 0) + v > tree.guaranteed[w.queue].get(k, 0):
                    return mine
        return 0

    def relied_on(self, inv, placement) -> int:
        """How many leaving workloads ``placement`` (already allocated) must wait for."""
        if not self.workloads:
            return 0
        nodes = set()
        for a in placement:
            n = inv.nodes[a.node]
            if (self.gpus.get(a.node, set()) & set(a.gpus) or n.free_cpu < self.cpu.get(a.node, 0)
                    or n.free_memory < self.memory.get(a.node, 0)):
                nodes.add(a.node)
        if not nodes:
            return 0
        return len(set().union(*(self.ids_on.get(n, ()) for n in nodes)))

    def _sum(self, tree) -> None:
        for v in self.workloads[self._summed:]:
            total = v.total
            for q in tree.chain[v.queue]:
                add_into(self._by_queue.setdefault(q, {}), total)
            add_into(self._by_user.setdefault((v.queue, v.user), {}), total)
            self._count[v.queue] = self._count.get(v.queue, 0) + 1
        self._summed = len(self.workloads)
