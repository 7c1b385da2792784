"""Where backfill reservations are computed (EASY backfill, Slurm style).

When the workload at the head of the line cannot start for lack of capacity,
it gets a reservation: the earliest time (``shadow``) at which it would fit if
running work ends at its declared run-time limit, and the nodes it would take
then. What is held now on each node is what it will take there less what
running work there frees by ``shadow``: free capacity beyond that is still
free at ``shadow`` with the holder placed (EASY's "extra" nodes, Mu'alem and
Feitelson), so any work may use it. Work behind it may start on the held
capacity only if it declares a run-time limit that ends before ``shadow``;
elsewhere it starts freely. If running work declares no limits the shadow time
is unknown and all the capacity it would take is held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .inventory import Inventory, Reserved
from .model import STOPPING, Workload, leaving
from .resources import CPU, GPU, MEMORY


@dataclass
class Reservation:
    workload: Workload
    shadow: float | None          # None: unknown (running work declares no limit)
    nodes: Reserved = field(default_factory=dict)   # held now, per node (module docstring)


def expected_end(w: Workload, now: float) -> float | None:
    if w.state in STOPPING:
        return now if leaving(w) else None      # past its stop deadline: nobody knows when
    if w.time_limit is None or w.admitted_at is None:
        return None
    return max(now, w.admitted_at + w.time_limit)


def reserve(inv: Inventory, holding, w: Workload, now: float, reserved: Reserved) -> Reservation:
    """Find when and where ``w`` fits as running work ends; nothing is changed."""
    if w.workers == 1:
        found = _reserve_one(inv, holding, w, now, reserved)
        if found is not None:
            return found
    ends = sorted(((e, v.seq, v) for v in holding if (e := expected_end(v, now)) is not None),
                  key=lambda t: (t[0], t[1]))
    need = w.request.get(GPU, 0) * w.workers
    released: list[Workload] = []
    found = None
    try:
        i = 0
        while i < len(ends):
            t = ends[i][0]
            # Release everything that ends at the same instant before trying.
            while i < len(ends) and ends[i][0] == t:
                v = ends[i][2]
                inv.release(v)
                released.append(v)
                i += 1
            if need and inv.free.get(GPU, 0) < need:
                continue
            placement = inv.place(w, reserved)
            if placement is not None:
                found = (t, placement)
                break
        if found is None:
            # Unknown when: keep the capacity it would take once everything has ended.
            rest = [v for v in holding if v not in released]
            for v in rest:
                inv.release(v)
            released.extend(rest)
            placement = inv.place(w, reserved)
            found = (None, placement or [])
    finally:
        for v in reversed(released):
            inv.allocate(v)
    shadow, placement = found
    nodes: Reserved = {}
    g, cpu, mem = w.request.get(GPU, 0), w.request.get(CPU, 0), w.request.get(MEMORY, 0)
    for a in placement:
        t0 = nodes.get(a.node, (0, 0, 0))
        nodes[a.node] = (t0[0] + g, t0[1] + cpu, t0[2] + mem)
    if shadow is not None:      # everything released had ended by shadow
        freed: dict[str, tuple[int, int, int]] = {}
        for v in released:
            for a in v.placement:
                if a.node in nodes:
                    f = freed.get(a.node, (0, 0, 0))
                    freed[a.node] = (f[0] + len(a.gpus), f[1] + v.request.get(CPU, 0),
                                     f[2] + v.request.get(MEMORY, 0))
        nodes = {n: _held(need, freed.get(n, (0, 0, 0))) for n, need in nodes.items()}
    return Reservation(w, shadow, nodes)


def _held(need: tuple[int, int, int], freed) -> tuple[int, int, int]:
    """What of the capacity free now must be kept for ``need`` at shadow, when ``freed`` has
    been added to it."""
    return tuple(max(0, n - f) for n, f in zip(need, freed))


def _reserve_one(inv: Inventory, holding, w: Workload, now: float, reserved: Reserved):
    """Fast path for one worker: count frees per node instead of replaying releases."""
    g, cpu, mem = w.request.get(GPU, 0), w.request.get(CPU, 0), w.request.get(MEMORY, 0)
    sel, model = w.node_selector, w.gpu_model
    ok = {name for name, n in inv.nodes.items()
          if n.spec.schedulable and n.spec.gpus >= g and n.spec.cpu >= cpu and n.spec.memory >= mem
          and inv.model_fits(n.spec, model, g) and (not sel or n.matches(sel))}
    if not ok:
        return None
    free: dict[str, list[int]] = {}
    start: dict[str, list[int]] = {}

    def slot(name):
        f = free.get(name)
        if f is None:
            n = inv.nodes[name]
            r = reserved.get(name, (0, 0, 0))
            f = free[name] = [len(n.free_gpus) - r[0], n.free_cpu - r[1], n.free_memory - r[2]]
            start[name] = list(f)
        return f

    ends = sorted(((e, v.seq, v) for v in holding if (e := expected_end(v, now)) is not None),
                  key=lambda t: (t[0], t[1]))
    i = 0
    while i < len(ends):
        t = ends[i][0]
        touched = set()
        while i < len(ends) and ends[i][0] == t:
            v = ends[i][2]
            for a in v.placement:
                if a.node in ok:
                    f = slot(a.node)
                    f[0] += len(a.gpus)
                    f[1] += v.request.get(CPU, 0)
                    f[2] += v.request.get(MEMORY, 0)
                    touched.add(a.node)
            i += 1
        fits = sorted(n for n in touched if free[n][0] >= g and free[n][1] >= cpu and free[n][2] >= mem)
        if fits:
            name = fits[0]
            return Reservation(w, t, {name: _held((g, cpu, mem), [x - y for x, y in zip(free[name], start[name])])})
    return None


def merge(into: Reserved, extra: Reserved) -> None:
    for node, (g, c, m) in extra.items():
        t = into.get(node, (0, 0, 0))
        into[node] = (t[0] + g, t[1] + c, t[2] + m)
