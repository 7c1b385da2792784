"""Where placement is decided: nodes, their free GPUs, and best-fit placement.

Schedulable nodes (healthy, not draining) sit in buckets by GPU model and
free-GPU count, so best fit ("the fullest node that still fits", which keeps
whole nodes free for big jobs) looks at a handful of buckets instead of every
node. GPUs are given by concrete index, lowest first.
"""

from __future__ import annotations

from .model import Assignment, NodeSpec, Workload
from .resources import CPU, GPU, MEMORY, flavor_key


class NodeState:
    __slots__ = ("spec", "free_gpus", "free_cpu", "free_memory", "bucket_key", "managed")

    def __init__(self, spec: NodeSpec):
        self.spec = spec
        self.free_gpus: list[int] = list(range(spec.gpus))
        self.free_cpu = spec.cpu
        self.free_memory = spec.memory
        self.bucket_key: tuple[str, int] | None = None
        self.managed = False        # its GPU model is under a queue's quota (Inventory.managed_models)

    def matches(self, selector: dict[str, str]) -> bool:
        labels = self.spec.labels
        return all(labels.get(k) == v for k, v in selector.items())


# Reserved capacity per node: (gpus, cpu, memory) kept for a reservation holder.
Reserved = dict[str, tuple[int, int, int]]


class Inventory:
    def __init__(self, specs: list[NodeSpec] = ()):
        self.nodes: dict[str, NodeState] = {}
        self.buckets: dict[str, list[dict[str, None]]] = {}   # model -> [free count] -> names
        self.cpu_only: dict[str, None] = {}
        self.capacity: dict[str, int] = {}   # totals over schedulable nodes
        self.free: dict[str, int] = {}
        self._managed: frozenset[str] = frozenset()
        for s in specs:
            self.add(s)

    # --- membership ----------------------------------------------------------

    @staticmethod
    def _model(spec: NodeSpec) -> str:
        return spec.gpu_model or ""

    def _totals(self, n: NodeState, sign: int) -> None:
        s = n.spec
        model = flavor_key(s.gpu_model) if s.gpu_model else None
        for vec, gpus, cpu, mem in ((self.capacity, s.gpus, s.cpu, s.memory),
                                    (self.free, len(n.free_gpus), n.free_cpu, n.free_memory)):
            vec[GPU] = vec.get(GPU, 0) + sign * gpus
            if model:
                vec[model] = vec.get(model, 0) + sign * gpus
            vec[CPU] = vec.get(CPU, 0) + sign * cpu
            vec[MEMORY] = vec.get(MEMORY, 0) + sign * mem

    def _bucket_out(self, n: NodeState) -> None:
        if n.bucket_key is not None:
            model, count = n.bucket_key
            del self.buckets[model][count][n.spec.name]
            n.bucket_key = None

    def _bucket_in(self, n: NodeState) -> None:
        if n.spec.gpus and n.spec.schedulable:
            model = self._model(n.spec)
            lists = self.buckets.setdefault(model, [])
            while len(lists) <= n.spec.gpus:
                lists.append({})
            count = len(n.free_gpus)
            lists[count][n.spec.name] = None
            n.bucket_key = (model, count)

    @property
    def managed_models(self) -> frozenset[str]:
        """GPU models under a queue's quota (``QueueTree.managed_models``): their GPUs go only to
        work that names the model."""
        return self._managed

    @managed_models.setter
    def managed_models(self, models: frozenset[str]) -> None:
        self._managed = frozenset(models)
        for n in self.nodes.values():
            n.managed = self._model(n.spec) in self._managed

    def model_fits(self, spec: NodeSpec, model: str | None, gpus: int) -> bool:
        """May GPU work asking for ``model`` (None: any GPU) run on a node of ``spec``'s model?"""
        if not gpus:
            return True
        return spec.gpu_model == model if model else self._model(spec) not in self._managed

    def with_free(self, gpus: int, model: str | None = None):
        """Schedulable nodes (of ``model``, or any unmanaged one) with at least ``gpus`` GPUs free,
        from the buckets: on a busy cluster a few, where scanning every node would cost thousands."""
        for m in ([model or ""] if model else [m for m in self.buckets if m not in self._managed]):
            lists = self.buckets.get(m, ())
            for count in range(gpus, len(lists)):
                for name in lists[count]:
                    yield self.nodes[name]

    def add(self, spec: NodeSpec, held: list[tuple[tuple[int, ...], int, int]] = ()) -> NodeState:
        """A node, with ``held`` (gpus, cpu, memory) of what already runs there taken."""
        n = NodeState(spec)
        n.managed = self._model(spec) in self._managed
        for gpus, cpu, mem in held:
            n.free_gpus = [g for g in n.free_gpus if g not in gpus]
            n.free_cpu -= cpu
            n.free_memory -= mem
        self.nodes[spec.name] = n
        if spec.schedulable:
            self._totals(n, 1)
            self._bucket_in(n)
            if not spec.gpus:
                self.cpu_only[spec.name] = None
        return n

    def update_spec(self, spec: NodeSpec, held: list[tuple[tuple[int, ...], int, int]]) -> None:
        """Replace a node's spec (health, drain, labels) keeping what runs there."""
        if spec.name in self.nodes:
            self.remove(spec.name)
        self.add(spec, held)

    def remove(self, name: str) -> None:
        n = self.nodes.pop(name)
        if n.spec.schedulable:
            self._totals(n, -1)
        self._bucket_out(n)
        self.cpu_only.pop(name, None)

    # --- allocation ----------------------------------------------------------

    def _take(self, n: NodeState, gpus: tuple[int, ...], cpu: int, mem: int, sign: int) -> None:
        self._bucket_out(n)
        if sign > 0:
            taken = set(gpus)
            n.free_gpus = [g for g in n.free_gpus if g not in taken]
        else:
            n.free_gpus = sorted(n.free_gpus + list(gpus))
        n.free_cpu -= sign * cpu
        n.free_memory -= sign * mem
        spec = n.spec
        if spec.schedulable:      # capacity stays; only what is free moves
            free, dg = self.free, -sign * len(gpus)
            free[GPU] = free.get(GPU, 0) + dg
            if spec.gpu_model:
                model = flavor_key(spec.gpu_model)
                free[model] = free.get(model, 0) + dg
            free[CPU] = free.get(CPU, 0) - sign * cpu
            free[MEMORY] = free.get(MEMORY, 0) - sign * mem
        self._bucket_in(n)

    def allocate(self, w: Workload) -> None:
        cpu, mem = w.request.get(CPU, 0), w.request.get(MEMORY, 0)
        for a in w.placement:
            self._take(self.nodes[a.node], a.gpus, cpu, mem, 1)

    def release(self, w: Workload) -> None:
        cpu, mem = w.request.get(CPU, 0), w.request.get(MEMORY, 0)
        for a in w.placement:
            n = self.nodes.get(a.node)
            if n is not None:
                self._take(n, a.gpus, cpu, mem, -1)

    # --- placement -----------------------------------------------------------

    def place(self, w: Workload, reserved: Reserved | None = None) -> list[Assignment] | None:
        """Best-fit placement of every worker of ``w`` (all or nothing), or None.

        ``reserved`` capacity is treated as taken. Nothing is changed.
        """
        g = w.request.get(GPU, 0)
        need_total = g * w.workers
        if need_total:
            key = flavor_key(w.gpu_model) if w.gpu_model else GPU
            if self.free.get(key, 0) < need_total:
                return None
        if w.workers == 1:
            a = self._place_one(w, g, {}, reserved)
            return [a] if a else None
        taken: dict[str, tuple[int, int, int]] = {}
        out: list[Assignment] = []
        for _ in range(w.workers):
            a = self._place_one(w, g, taken, reserved)
            if a is None:
                return None
            out.append(a)
            t = taken.get(a.node, (0, 0, 0))
            taken[a.node] = (t[0] + g, t[1] + w.request.get(CPU, 0), t[2] + w.request.get(MEMORY, 0))
        # Concrete indices: workers on one node get disjoint GPUs.
        used: dict[str, int] = {}
        for a in out:
            if g:
                n = self.nodes[a.node]
                start = used.get(a.node, 0)
                a.gpus = tuple(n.free_gpus[start:start + g])
                used[a.node] = start + g
        return out

    def _fits(self, n: NodeState, g: int, cpu: int, mem: int, selector, taken, reserved) -> bool:
        t = taken.get(n.spec.name) if taken else None
        r = reserved.get(n.spec.name) if reserved else None
        fg, fc, fm = len(n.free_gpus), n.free_cpu, n.free_memory
        if t:
            fg, fc, fm = fg - t[0], fc - t[1], fm - t[2]
        if r:
            fg, fc, fm = fg - r[0], fc - r[1], fm - r[2]
        if fg < g or (cpu and fc < cpu) or (mem and fm < mem):
            return False
        return not selector or n.matches(selector)

    def _place_one(self, w: Workload, g: int, taken, reserved) -> Assignment | None:
        cpu, mem, sel = w.request.get(CPU, 0), w.request.get(MEMORY, 0), w.node_selector
        if g == 0:
            # CPU-only work goes to CPU nodes first, then the GPU node with most CPU left.
            best = None
            for name in self.cpu_only:
                n = self.nodes[name]
                if self._fits(n, 0, cpu, mem, sel, taken, reserved):
                    if best is None or n.free_cpu < best.free_cpu:
                        best = n
            if best is None:
                for n in self.nodes.values():
                    if n.spec.gpus and n.spec.schedulable and self._fits(n, 0, cpu, mem, sel, taken, reserved):
                        if best is None or len(n.free_gpus) < len(best.free_gpus):
                            best = n
            return Assignment(best.spec.name, ()) if best else None
        models = [w.gpu_model] if w.gpu_model else sorted(m for m in self.buckets if m not in self._managed)
        extra = max((t[0] for t in taken.values()), default=0) if taken else 0
        if reserved:
            extra += max((r[0] for r in reserved.values()), default=0)
        top = max((len(self.buckets.get(m, ())) for m in models), default=0)
        for count in range(g, top):
            for m in models:
                lists = self.buckets.get(m)
                if not lists:
                    continue
                # Nodes whose *effective* free count is `count` may sit in a higher bucket
                # when taken/reserved capacity is subtracted: look up to `extra` above.
                for c in range(count, min(count + extra, len(lists) - 1) + 1):
                    for name in lists[c]:
                        n = self.nodes[name]
                        if self._fits(n, g, cpu, mem, sel, taken, reserved):
                            if c == count or self._effective(n, taken, reserved) == count:
                                return Assignment(name, tuple(n.free_gpus[:g]))
        return None

    @staticmethod
    def _effective(n: NodeState, taken, reserved) -> int:
        fg = len(n.free_gpus)
        if taken and n.spec.name in taken:
            fg -= taken[n.spec.name][0]
        if reserved and n.spec.name in reserved:
            fg -= reserved[n.spec.name][0]
        return fg
