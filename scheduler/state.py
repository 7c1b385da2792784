"""The live picture the engine decides on: queues, nodes, classes and workloads.

Every change of who holds what goes through ``allocate`` / ``release`` so the
queue usage, per-user usage and node inventory never disagree.
"""

from __future__ import annotations

from collections import Counter

from .inventory import Inventory
from .model import HELD, HOLDING, PENDING, QUEUED_AT, TOP, NodeSpec, PriorityClass, QueueSpec, Workload, leaving
from .quota import QueueTree
from .resources import CPU, MEMORY


class PendingWork(dict):
    """Pending workloads by id, keeping count of each user's (``by_user``) as they come and go:
    the submission cap (``max_waiting_per_user``) reads it without a pass over the line; and
    which its owners put first among their own (``topped``, tops.py): the order looks for them
    only when there are some."""

    def __init__(self):
        super().__init__()
        self.by_user: Counter = Counter()
        self.topped: set[str] = set()

    def __setitem__(self, key: str, w: Workload) -> None:
        old = dict.get(self, key)
        if old is not None:
            self.by_user[old.user] -= 1
        dict.__setitem__(self, key, w)
        self.by_user[w.user] += 1
        if TOP in w.metadata:
            self.topped.add(key)
        else:
            self.topped.discard(key)

    def pop(self, key: str, *default):
        w = dict.pop(self, key, _MISSING)
        if w is _MISSING:
            if default:
                return default[0]
            raise KeyError(key)
        self.by_user[w.user] -= 1
        self.topped.discard(key)
        return w

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    def _refuse(self, *a, **k):
        raise TypeError("PendingWork changes one entry at a time ([key] = w, pop): counts are kept")

    update = setdefault = popitem = clear = _refuse


_MISSING = object()


class ClusterState:
    def __init__(self, queues: list[QueueSpec] = (), classes: list[PriorityClass] = (),
                 nodes: list[NodeSpec] = ()):
        self.classes: dict[str, PriorityClass] = {c.name: c for c in classes}
        self.tree = QueueTree(list(queues))
        self.inventory = Inventory(list(nodes))
        self.inventory.managed_models = self.tree.managed_models()
        self.workloads: dict[str, Workload] = {}
        self.pending = PendingWork()
        self.held = PendingWork()       # waiting for the work they run after (dependencies.py)
        self.holding: dict[str, Workload] = {}

    # --- workloads -----------------------------------------------------------

    def add(self, w: Workload) -> None:
        """Track a workload in whatever state it is (used on submit and on load)."""
        self.workloads[w.id] = w
        if w.state == PENDING:
            self.pending[w.id] = w
        elif w.state == HELD:
            self.held[w.id] = w
        elif w.state in HOLDING:
            self._charge(w, 1)
            self.holding[w.id] = w
            if leaving(w):
                self.tree.mark_leaving(w.queue, w.total, 1)

    def forget(self, w: Workload) -> None:
        self.workloads.pop(w.id, None)
        self.pending.pop(w.id, None)
        self.held.pop(w.id, None)

    def allocate(self, w: Workload, placement, now: float, state: str) -> None:
        self.pending.pop(w.id, None)
        w.placement = placement
        w.state = state
        w.admitted_at = now
        self._charge(w, 1)
        self.holding[w.id] = w

    def release(self, w: Workload) -> None:
        """Give back what ``w`` holds; its placement stays readable until reassigned."""
        if self.holding.pop(w.id, None) is not None:
            self._charge(w, -1)
            if leaving(w):
                self.tree.mark_leaving(w.queue, w.total, -1)

    def requeue(self, w: Workload, now: float | None = None) -> None:
        """Back to pending; ``now``: it left what it held and waits again from then on
        (``Workload.waiting_since``). Without it (work only nominated in a cycle) it never left."""
        if now is not None:
            w.metadata[QUEUED_AT] = now
        w.state = PENDING
        w.placement = []
        w.admitted_at = None
        w.started_at = None
        self.pending[w.id] = w

    def _charge(self, w: Workload, sign: int) -> None:
        self.tree.charge(w.queue, w.user, w.total, sign)
        if sign > 0:
            self.inventory.allocate(w)
        else:
            self.inventory.release(w)

    # --- configuration -------------------------------------------------------

    def rebuild_tree(self, queues: list[QueueSpec]) -> None:
        tree = QueueTree(queues)
        for w in self.holding.values():
            tree.charge(w.queue, w.user, w.total, 1)
            if leaving(w):
                tree.mark_leaving(w.queue, w.total, 1)
        self.tree = tree
        self.inventory.managed_models = tree.managed_models()

    def put_node(self, spec: NodeSpec) -> None:
        held = []
        for w in self.holding.values():
            for a in w.placement:
                if a.node == spec.name:
                    held.append((a.gpus, w.request.get(CPU, 0), w.request.get(MEMORY, 0)))
        self.inventory.update_spec(spec, held)

    def holders_on(self, node: str) -> list[Workload]:
        return [w for w in self.holding.values() if any(a.node == node for a in w.placement)]



    def restore(self, w: Workload) -> None:
        """Undo ``release`` of a workload that still holds its placement."""
        if w.id not in self.holding:
            self._charge(w, 1)
            self.holding[w.id] = w
