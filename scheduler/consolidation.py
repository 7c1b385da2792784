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
  elsewhere right now, with the owed job placed. A move is a restart from the last
  checkpoint, and its queue's usage is the same after it, so no guarantee or fair share
  changes.

Among the nodes that work, the one moving the fewest GPUs (then fewest workloads) wins.
Nothing is changed here; ``plan`` returns what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Workload
from .preemption import usable
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
    eligible = {v.id for lst in index.by_queue.values() for _, v in lst}
    on_node: dict[str, list[Workload]] = {}
    for v in state.holding.values():
        if v.id in eligible:
            for a in v.placement:
                on_node.setdefault(a.node, []).append(v)
    tree = state.tree
    own_chain = tree.chain[w.queue]
    spare = {q: tree.usage[q].get(GPU, 0) - tree.guaranteed[q].get(GPU, 0) for q in tree.guaranteed}
    options = []
    for name, holders in on_node.items():
        n = state.inventory.nodes[name]
        if not usable(n, w) or n.spec.gpus < w.request.get(GPU, 0):
            continue
        found = _room_on(n, name, holders, w, own_chain, tree, spare, max_moves, state.classes)
        if found is not None:
            options.append(found)
    options.sort(key=lambda o: o[0])
    for _, evict, move in options:
        done = _try(state, w, evict, move, quota_ok, attempt, reserved)
        if done is not None:
            return done
    return None


def _room_on(n, name: str, holders: list[Workload], w: Workload, own_chain, tree, spare, max_moves,
             classes):
    """(score, evict, move) that frees enough of node ``name`` for ``w``, or None."""
    need = (w.request.get(GPU, 0), w.request.get(CPU, 0), w.request.get(MEMORY, 0))
    free = [len(n.free_gpus), n.free_cpu, n.free_memory]

    def gives(v):
        per = sum(1 for a in v.placement if a.node == name)
        return (sum(len(a.gpus) for a in v.placement if a.node == name),
                v.request.get(CPU, 0) * per, v.request.get(MEMORY, 0) * per)

    def fits(extra):
        return all(free[i] + sum(gives(v)[i] for v in extra) >= need[i] for i in range(3))

    taken: dict[str, int] = {}
    evict, movable = [], []
    for v in holders:
        if v.queue != w.queue and tree.borrowing(v.queue, v.total, own_chain) \
                and spare[v.queue] - taken.get(v.queue, 0) > 0:
            taken[v.queue] = taken.get(v.queue, 0) + v.request.get(GPU, 0) * v.workers
            evict.append(v)
        elif v.workers == 1 and classes[v.priority].requeue:     # a move must not end it
            movable.append(v)
    # Fewest moves: the largest first, then give back whatever turns out unnecessary.
    movable.sort(key=lambda v: (-gives(v)[0], v.seq))
    move = []
    for v in movable:
        if fits(evict + move):
            break
        move.append(v)
    if not move or not fits(evict + move) or len(move) > max_moves:
        return None      # no move needed is reclaim's case, which already failed
    for group in (move, evict):
        for v in list(reversed(group)):
            group.remove(v)
            if not fits(evict + move):
                group.append(v)
    if not move:
        return None
    score = (sum(gives(v)[0] for v in move), len(move), len(evict))
    return score, evict, move


def _try(state, w: Workload, evict: list[Workload], move: list[Workload], quota_ok, attempt,
         reserved) -> Plan | None:
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
    if placement is not None:
        old_w = w.placement
        w.placement = placement
        inv.allocate(w)
        for v in move:
            where = inv.place(v, reserved)
            if where is None:
                break
            moved.append((v, v.placement))
            v.placement = where
            inv.allocate(v)
        ok = len(moved) == len(move)
        plan = Plan(evict, [(v, v.placement) for v, _ in moved], placement) if ok else None
        for v, old in reversed(moved):
            inv.release(v)
            v.placement = old
        inv.release(w)
        w.placement = old_w
        if ok:
            return plan
    for v in reversed(evict + move):
        state.restore(v)
    return None
