"""Whole nodes cleared for a gang by moving running work elsewhere (consolidation for gangs).

A gang (multi-worker work) needs whole nodes, and on a busy cluster one-node jobs keep
landing on every node that frees up: its GPUs may be there in total but scattered.

* ``plan_gang``: a gang whose quotas let it start gets the nodes it lacks cleared by moving
  up to ``consolidation_moves`` one-node jobs off each (the same kind of work a one-node plan
  of ``consolidation`` may move) to free GPUs elsewhere, choosing the nodes that need the
  fewest GPUs moved. Moves change no total, so the cluster must have the gang's GPUs free.
* ``plan_owed_gang``: a gang its team is owed, when reclaim could not give it whole nodes
  (the borrowed GPUs sit beside work that may not be taken, or the borrowers may give back
  too little on any one node) and the free GPUs are too few for moves alone: each node it
  lacks is cleared as a one-node plan clears one — borrowed work there reclaimed, the rest
  moved to free room or to room that reclaim makes on another node — with what each
  borrowing queue gives back counted over all the nodes together.

Nothing is changed here; both return a ``consolidation.Plan`` or None.
"""

from __future__ import annotations

import heapq
import math

from .consolidation import Plan, _rehomer, _room_on, _surroundings, _try
from .model import Workload
from .resources import GPU
from .victim_nodes import usable


def _lacking(inv, w: Workload, per: int) -> int:
    """How many of ``w``'s workers no node has room for now."""
    return w.workers - sum(len(n.free_gpus) // per for n in inv.with_free(per, w.gpu_model) if usable(n, w))


def plan_gang(state, index, w: Workload, attempt, moves_per_node: int, reserved) -> Plan | None:
    """A plan that clears, for the gang ``w``, the whole nodes it lacks by moves alone, or None.
    ``attempt()`` returns a placement for ``w`` in the current state; the caller has checked
    its quotas."""
    per = w.request.get(GPU, 0)
    if w.workers < 2 or per == 0 or moves_per_node <= 0:
        return None
    inv, classes = state.inventory, state.classes
    if inv.free.get(GPU, 0) < per * w.workers:
        return None     # moves change no total: too few GPUs are free for the gang
    lacking = _lacking(inv, w, per)
    if lacking <= 0:
        return None     # not short of whole nodes: held back by something else
    gone = index.gone
    options = []
    for name, held in index.movable_by_node(classes).items():
        n = inv.nodes[name]
        short = per - len(n.free_gpus)
        if short <= 0 or n.spec.gpus < per or not usable(n, w):
            continue
        # The largest first: the fewest moves that free what the worker needs.
        move, freed = [], 0
        for v in held:
            if freed >= short or len(move) >= moves_per_node:
                break
            if v.id not in gone:
                move.append(v)
                freed += v.request.get(GPU, 0)
        if freed >= short:
            options.append((freed, len(move), name, move))
    if len(options) < lacking:
        return None     # the nodes it lacks cannot be cleared
    options.sort(key=lambda o: o[:3])
    return _try(state, w, [], [v for o in options[:lacking] for v in o[3]], lambda: True, attempt, reserved)


def plan_owed_gang(state, index, w: Workload, quota_ok, attempt, moves_per_node: int, reserved) -> Plan | None:
    """A plan that clears the whole nodes the owed gang ``w`` lacks with reclaim and moves
    together, or None. ``quota_ok()`` says whether ``w``'s quotas let it start once the
    plan's reclaim victims are released; ``attempt()`` returns a placement for it."""
    per = w.request.get(GPU, 0)
    if w.workers < 2 or per == 0 or moves_per_node <= 0:
        return None
    inv, tree = state.inventory, state.tree
    lacking = _lacking(inv, w, per)
    if lacking <= 0:
        return None
    on_node, spare, lenders, room_elsewhere = _surroundings(state, index, w)
    own_chain = tree.chain[w.queue]
    # Nodes in order of a lower bound on the GPUs clearing each moves (what a worker needs
    # beyond the node's free GPUs and all that borrowers hold there), as ``consolidation.plan``
    # orders them: a node's plan is taken once no node left could move fewer.
    nodes = []
    for pos, (name, holders) in enumerate(on_node.items()):
        n = inv.nodes[name]
        held = sum(len(a.gpus) for v in holders for a in v.placement if a.node == name)
        if not usable(n, w) or n.spec.gpus < per or len(n.free_gpus) >= per or len(n.free_gpus) + held < per:
            continue
        lendable = sum(len(a.gpus) for v in holders if v.queue != w.queue and spare[v.queue] > 0
                       for a in v.placement if a.node == name)
        nodes.append((max(0, per - len(n.free_gpus) - lendable), pos, name, holders, n, held))
    nodes.sort(key=lambda t: t[:2])
    given: dict[str, int] = {}           # GPUs each borrowing queue gives back in the plan so far
    evict: dict[str, Workload] = {}
    move: list[Workload] = []
    found: list = []
    i = 0
    chosen: set[str] = set()
    while (found or i < len(nodes)) and lacking > 0:
        if found and (i == len(nodes) or found[0][0][0] < nodes[i][0]):
            _, pos, name, holders, n, room = heapq.heappop(found)
            # Again with what the borrowers may still give back after the nodes chosen so far.
            left = {q: s - given.get(q, 0) for q, s in spare.items()}
            option = _room_on(n, name, [v for v in holders if v.id not in evict], w, own_chain, tree, left,
                              moves_per_node, state.classes, room, moves_needed=False)
            if option is None:
                continue
            for v in option[1]:
                evict[v.id] = v
                given[v.queue] = given.get(v.queue, 0) + v.request.get(GPU, 0) * v.workers
            move += option[2]
            chosen.add(name)
            lacking -= 1
            continue
        _, pos, name, holders, n, held = nodes[i]
        i += 1
        room = math.inf if any(len(v.placement) > 1 for v in holders) else \
            max(room_elsewhere(name), len(n.free_gpus) + held - per)
        option = _room_on(n, name, holders, w, own_chain, tree, spare, moves_per_node, state.classes, room,
                          moves_needed=False)
        if option is not None:
            heapq.heappush(found, (option[0], pos, name, holders, n, room))
    if lacking > 0:
        return None
    rehome = _rehomer(state, lenders, spare, list(evict.values()), chosen) if lenders and move else None
    return _try(state, w, list(evict.values()), move, quota_ok, attempt, reserved, rehome)
