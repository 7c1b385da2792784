"""Where running work is moved so that work its team is owed can start (consolidation).

Reclaim frees borrowed GPUs, but a single-node job that fits in its team's guarantee may
still find no node with room: the free GPUs and those other teams borrow are scattered over
nodes that also run work of teams at or below their guarantee (fragmentation), and taking
that work would break *its* guarantee. Consolidation (KAI scheduler's action of that name)
picks one node and makes room there with

* the free GPUs it has,
* reclaim victims on it (borrowed capacity, exactly as reclaim may take it), and
* at most ``EngineConfig.consolidation_moves`` workloads *moved*: preemptible one-worker
  work of a class that requeues, that has run its class's ``preempt_after`` and fits
  elsewhere right now, with the owed job placed — or fits on another node once borrowed
  work there is reclaimed too (``_rehomer``: within what the borrower may give up; on a full
  cluster that is the only room there is). A move is a restart from the last checkpoint,
  and its queue's usage is the same after it, so no guarantee or fair share changes.

On each node what moves is chosen two ways, the largest first and the smallest first; among
the plans that work, the one moving the fewest GPUs (then fewest workloads) wins.

Gangs (multi-worker work) get whole nodes cleared the same way: ``gang_consolidation``.

Nothing is changed here; ``plan`` returns what to do.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from .model import Workload
from .victim_nodes import usable
from .resources import CPU, GPU, MEMORY


@dataclass
class Plan:
    evict: list[Workload]                    # reclaim victims: requeued
    moves: list[tuple[Workload, list]]       # (moved workload, where it starts again)
    placement: list                          # where the owed workload starts


def plan(state, index, w: Workload, quota_ok, attempt, max_moves: int, reserved) -> Plan | None:
    """A plan that lets ``w`` (one worker, owed) start, or None. ``index`` is the cycle's
    ``preemption.VictimIndex`` (who may be stopped at all); ``quota_ok()`` says whether ``w``'s
    quotas let it start, ``attempt()`` returns a placement for it, both in the current state."""
    if w.workers != 1 or max_moves <= 0:
        return None
    on_node, spare, lenders, room_elsewhere = _surroundings(state, index, w)
    tree = state.tree
    own_chain = tree.chain[w.queue]
    need_gpus = w.request.get(GPU, 0)
    # Nodes in order of a lower bound on the GPUs a plan there moves (what w needs beyond the
    # free GPUs and all the GPUs of queues above their guarantee): a plan found is tried as
    # soon as no node left could beat it. Same order as scoring every node first (ties in
    # node order), without scoring the thousands that cannot win.
    nodes = []
    for pos, (name, holders) in enumerate(on_node.items()):
        n = state.inventory.nodes[name]
        held = sum(len(a.gpus) for v in holders for a in v.placement if a.node == name)
        if not usable(n, w) or n.spec.gpus < need_gpus or len(n.free_gpus) + held < need_gpus:
            continue
        lendable = sum(len(a.gpus) for v in holders if v.queue != w.queue and spare[v.queue] > 0
                       for a in v.placement if a.node == name)
        nodes.append((max(0, need_gpus - len(n.free_gpus) - lendable), pos, name, holders, n, held))
    nodes.sort(key=lambda t: t[:2])
    found: list = []        # heap of (score, node position, evict, move)
    i = 0
    while found or i < len(nodes):
        if found and (i == len(nodes) or found[0][0][0] < nodes[i][0]):
            _, _, _, evict, move = heapq.heappop(found)
            if not _movers_may_fit(state.inventory, w, evict, move, room_elsewhere):
                continue
            rehome = _rehomer(state, lenders, spare, evict, {move[0].placement[0].node}) if lenders else None
            done = _try(state, w, evict, move, quota_ok, attempt, reserved, rehome)
            if done is not None:
                return done
            continue
        _, pos, name, holders, n, held = nodes[i]
        i += 1
        # The most GPUs a moved workload could find: on another node now, or what is left here
        # with everything here stopped and w placed (unknown if stopping a gang frees other nodes).
        room = math.inf if any(len(v.placement) > 1 for v in holders) else \
            max(room_elsewhere(name), len(n.free_gpus) + held - need_gpus)
        for k, option in enumerate(_room_options(n, name, holders, w, own_chain, tree, spare, max_moves,
                                                 state.classes, room)):
            heapq.heappush(found, (option[0], pos, k, option[1], option[2]))
    return None


def _surroundings(state, index, w: Workload):
    """What every node's plan for ``w`` reads: node -> the holders there that may be stopped
    (in the engine's holder order), each queue's GPUs above its guarantee, node -> borrowed
    work reclaim may take (``_lenders_by_node``), and ``_most_free_elsewhere`` over them."""
    eligible = index.eligible()
    on_node: dict[str, list[Workload]] = {}
    for v in state.holding.values():
        if v.id in eligible:
            for a in v.placement:
                on_node.setdefault(a.node, []).append(v)
    tree = state.tree
    spare = {q: tree.usage[q].get(GPU, 0) - tree.guaranteed[q].get(GPU, 0) for q in tree.guaranteed}
    lenders = _lenders_by_node(state, on_node, w, tree.chain[w.queue])
    return on_node, spare, lenders, _most_free_elsewhere(state.inventory, lenders)


def _lenders_by_node(state, on_node, w: Workload, own_chain) -> dict[str, list[Workload]]:
    """node -> one-worker work there that reclaim may take for ``w`` (its queue borrows),
    largest first: room for work moved off the node cleared for ``w``."""
    tree = state.tree
    out = {}
    for name, holders in on_node.items():
        lend = [v for v in holders
                if v.workers == 1 and v.queue != w.queue and tree.borrowing(v.queue, v.total, own_chain)]
        if lend:
            out[name] = sorted(lend, key=lambda v: (-v.request.get(GPU, 0), v.seq))
    return out


def _rehomer(state, lenders, spare, evict, cleared: set[str]):
    """``rehome(v)``: borrowed work on one other node whose stopping lets moved ``v`` start
    there (fewest GPUs stopped), not on a ``cleared`` node, within what each borrowing queue
    may still give back after ``evict``; or None. It counts what it hands out."""
    inv = state.inventory
    taken: dict[str, int] = {}
    for v in evict:
        taken[v.queue] = taken.get(v.queue, 0) + v.request.get(GPU, 0) * v.workers
    released: set[str] = {v.id for v in evict}

    def rehome(v):
        need = v.request.get(GPU, 0)
        best = None
        for name, held in lenders.items():
            n = inv.nodes[name]
            short = need - len(n.free_gpus)
            if name in cleared or short <= 0 or not usable(n, v):
                continue
            chosen, used, got = [], {}, 0
            for u in held:
                if got >= short:
                    break
                q = u.queue
                if u.id in released or spare[q] - taken.get(q, 0) - used.get(q, 0) <= 0:
                    continue
                chosen.append(u)
                used[q] = used.get(q, 0) + u.request.get(GPU, 0)
                got += u.request.get(GPU, 0)
            if got < short:
                continue
            for u in list(reversed(chosen)):       # give back what turns out unnecessary
                if got - u.request.get(GPU, 0) >= short:
                    chosen.remove(u)
                    used[u.queue] -= u.request.get(GPU, 0)
                    got -= u.request.get(GPU, 0)
            if best is None or (got, len(chosen), name) < best[0]:
                best = ((got, len(chosen), name), chosen, used)
        if best is None:
            return None
        for q, g in best[2].items():
            taken[q] = taken.get(q, 0) + g
        released.update(u.id for u in best[1])
        return best[1]
    return rehome


def _most_free_elsewhere(inv, lenders=None):
    """node -> the most free GPUs on any *other* node (from the two freest nodes), counting
    as free what ``lenders`` hold there (reclaim may take it for moved work)."""
    lenders = lenders or {}
    top = sorted(((len(n.free_gpus) + sum(v.request.get(GPU, 0) for v in lenders.get(name, ())), name)
                  for name, n in inv.nodes.items()), reverse=True)[:2]
    first = top[0] if top else (0, None)
    second = top[1][0] if len(top) > 1 else 0
    return lambda name: second if name == first[1] else first[0]


def _movers_may_fit(inv, w: Workload, evict: list[Workload], move: list[Workload], room_elsewhere) -> bool:
    """A necessary condition for ``_try``: each moved workload needs as many GPUs as are free on
    some other node now, or as are left on its own node once ``w`` has its share. Valid when
    everything stopped is on that one node (then ``w`` can only land there); a full cluster
    fails most plans here, without trying them (at 5,000 nodes trying cost seconds a cycle)."""
    name = move[0].placement[0].node
    if any(a.node != name for v in evict + move for a in v.placement):
        return True
    left = len(inv.nodes[name].free_gpus) + sum(len(a.gpus) for v in evict + move for a in v.placement) \
        - w.request.get(GPU, 0)
    most = max(room_elsewhere(name), left)
    return all(v.request.get(GPU, 0) <= most for v in move)


def _room_on(n, name: str, holders: list[Workload], w: Workload, own_chain, tree, spare, max_moves,
             classes, room: float = math.inf, moves_needed: bool = True):
    """The best (score, evict, move) of ``_room_options``, or None."""
    options = _room_options(n, name, holders, w, own_chain, tree, spare, max_moves, classes, room, moves_needed)
    return options[0] if options else None


def _room_options(n, name: str, holders: list[Workload], w: Workload, own_chain, tree, spare, max_moves,
                  classes, room: float = math.inf, moves_needed: bool = True) -> list:
    """Ways to free enough of node ``name`` for (a worker of) ``w``, as (score, evict, move), the
    best first (fewest GPUs moved, then moves, then reclaim victims). Work that needs more than
    ``room`` GPUs could go nowhere else: it is not moved. With ``moves_needed`` a plan of
    reclaim alone is none (reclaim's own case, already tried)."""
    need = (w.request.get(GPU, 0), w.request.get(CPU, 0), w.request.get(MEMORY, 0))
    free = [len(n.free_gpus), n.free_cpu, n.free_memory]

    given: dict[str, tuple[int, int, int]] = {}

    def gives(v):
        g = given.get(v.id)
        if g is None:
            per = sum(1 for a in v.placement if a.node == name)
            g = given[v.id] = (sum(len(a.gpus) for a in v.placement if a.node == name),
                               v.request.get(CPU, 0) * per, v.request.get(MEMORY, 0) * per)
        return g

    def fits(extra):
        return all(free[i] + sum(gives(v)[i] for v in extra) >= need[i] for i in range(3))

    taken: dict[str, int] = {}
    evict, movable = [], []
    for v in holders:
        if v.queue != w.queue and tree.borrowing(v.queue, v.total, own_chain) \
                and spare[v.queue] - taken.get(v.queue, 0) > 0:
            taken[v.queue] = taken.get(v.queue, 0) + v.request.get(GPU, 0) * v.workers
            evict.append(v)
        elif v.workers == 1 and classes[v.priority].requeue and v.request.get(GPU, 0) <= room:  # a move must not end it
            movable.append(v)
    # Two ways to choose what moves: the largest first (fewest moves), and the smallest first
    # (fewest GPUs moved: a large job moved first may fit nowhere else while two small ones
    # would); each gives back whatever turns out unnecessary.
    movable.sort(key=lambda v: (-gives(v)[0], v.seq))
    if not fits(evict + movable[:max_moves]):
        return []       # what the loops below would find, sooner
    options = []
    for order in (movable, movable[::-1]):
        option = _choose_moves(order, list(evict), fits, gives, max_moves, moves_needed)
        if option is not None and all(_ids(option) != _ids(o) for o in options):
            options.append(option)
    options.sort(key=lambda o: o[0])
    return options


def _ids(option) -> tuple[frozenset, frozenset]:
    return frozenset(v.id for v in option[1]), frozenset(v.id for v in option[2])


def _choose_moves(order, evict, fits, gives, max_moves: int, moves_needed: bool):
    """(score, evict, move): the workloads of ``order`` taken in turn until ``fits``, then
    those (and reclaim victims) that turn out unnecessary given back; or None."""
    move = []
    for v in order:
        if fits(evict + move):
            break
        move.append(v)
    if (moves_needed and not move) or not fits(evict + move) or len(move) > max_moves:
        return None      # no move needed is reclaim's case, which already failed
    for group in (move, evict):
        for v in list(reversed(group)):
            group.remove(v)
            if not fits(evict + move):
                group.append(v)
    if moves_needed and not move:
        return None
    return (sum(gives(v)[0] for v in move), len(move), len(evict)), evict, move


def _try(state, w: Workload, evict: list[Workload], move: list[Workload], quota_ok, attempt,
         reserved, rehome=None) -> Plan | None:
    """Release ``evict``, check ``w``'s quotas (moved work still counts: it starts again), release
    ``move``, place ``w``, then each moved workload elsewhere. On success the released work
    stays released (the caller stops it); else all is undone."""
    inv = state.inventory
    for v in evict:
        state.release(v)
    ok_quota = quota_ok()
    for v in move:
        state.release(v)
    placement = attempt() if ok_quota else None
    moved: list[tuple[Workload, list]] = []
    extra: list[Workload] = []      # borrowed work stopped elsewhere to make room for moved work
    if placement is not None:
        old_w = w.placement
        w.placement = placement
        inv.allocate(w)
        for v in move:
            where = inv.place(v, reserved)
            if where is None and rehome is not None:
                more = rehome(v)
                for u in more or ():
                    state.release(u)
                extra += more or []
                where = inv.place(v, reserved) if more else None
            if where is None:
                break
            moved.append((v, v.placement))
            v.placement = where
            inv.allocate(v)
        ok = len(moved) == len(move)
        plan = Plan(evict + extra, [(v, v.placement) for v, _ in moved], placement) if ok else None
        for v, old in reversed(moved):
            inv.release(v)
            v.placement = old
        inv.release(w)
        w.placement = old_w
        if ok:
            return plan
    for v in reversed(evict + move + extra):
        state.restore(v)
    return None
