"""Where preemption and reclaim victims are chosen.

Who may be a victim of pending workload ``w`` (all must be preemptible and
have run at least their class's ``preempt_after``):

* work of lower rank in ``w``'s own queue;
* when ``w`` fits in its queue's guarantee (reclaim): work of any rank in
  other queues that are above their guarantee, i.e. borrowed capacity;
* when ``w`` itself borrows: lower-ranked borrowers of other queues.

Victims are tried lower rank first, then borrowers, youngest first; once
``w`` fits, victims that turn out unnecessary are given back (oldest first),
so the set is small and young. A queue is never taken below its guarantee by
reclaim: a borrower is only a candidate while its queue is above guarantee.
"""

from __future__ import annotations

from .model import PREEMPTING, PriorityClass, Workload


class VictimIndex:
    """Preemptible holders grouped by queue, in preference order, built once per cycle.

    Work admitted in the current cycle is never a victim in that cycle.
    """

    def __init__(self, state, now: float):
        self.by_queue: dict[str, list[tuple[tuple, Workload]]] = {}
        for v in state.holding.values():
            if v.state == PREEMPTING or v.admitted_at is None or v.admitted_at >= now:
                continue
            vc = state.classes.get(v.priority)
            if vc is None or not vc.preemptible or now - v.admitted_at < vc.preempt_after:
                continue
            self.by_queue.setdefault(v.queue, []).append(((vc.rank, -v.admitted_at, -v.seq), v))
        for lst in self.by_queue.values():
            lst.sort(key=lambda t: t[0])

    def drop(self, victims: list[Workload]) -> None:
        gone = {v.id for v in victims}
        for q in {v.queue for v in victims}:
            self.by_queue[q] = [t for t in self.by_queue.get(q, []) if t[1].id not in gone]


def candidates(state, index: VictimIndex, w: Workload, cls: PriorityClass) -> list[Workload]:
    tree = state.tree
    own_chain = tree.chain[w.queue]
    within = tree.within_guarantee(w.queue, w.total) is None
    out = []
    for q, lst in index.by_queue.items():
        if q == w.queue:
            for key, v in lst:
                if key[0] >= cls.rank:
                    break
                out.append(((0,) + key, v))
            continue
        if not within and not cls.may_borrow:
            continue
        if not lst or not tree.borrowing(q, lst[0][1].total, own_chain):
            continue    # quick look with one holder; choose() checks each victim again
        for key, v in lst:
            if within:
                out.append(((0 if key[0] < cls.rank else 1,) + key, v))
            elif key[0] < cls.rank:
                out.append(((0,) + key, v))
            else:
                break
    out.sort(key=lambda t: t[0])
    return [v for _, v in out]


def choose(state, w: Workload, cands: list[Workload], attempt, limit: int, node_tries: int = 32):
    """Victims for ``w``: released, with the placement they make possible; or (None, []).

    A single-node workload first looks node by node (victims on one node free
    that node, so the set stays small); otherwise, and as a fallback, victims
    are released in preference order across the cluster. Either way,
    unnecessary victims are given back afterwards.
    """
    cands = cands[:limit]
    if w.workers == 1:
        by_node: dict[str, list[Workload]] = {}
        for v in cands:
            for a in v.placement:
                group = by_node.setdefault(a.node, [])
                if not group or group[-1] is not v:
                    group.append(v)
        best = None
        for node, group in list(by_node.items())[:node_tries]:
            placement, chosen = _greedy(state, w, group, attempt)
            if placement is not None:
                score = (len(chosen), [cands.index(v) for v in chosen])
                if best is None or score < best[0]:
                    best = (score, chosen)
                for v in reversed(chosen):
                    state.restore(v)
                if len(chosen) == 1 and score[1][0] == 0:
                    break   # cannot do better than the single most preferred victim
        if best is not None:
            placement, chosen = _greedy(state, w, best[1], attempt)
            if placement is not None:
                return placement, chosen
    return _greedy(state, w, cands, attempt)


def _greedy(state, w: Workload, cands: list[Workload], attempt):
    tree = state.tree
    own_chain = tree.chain[w.queue]
    chosen: list[Workload] = []
    placement = None
    for v in cands:
        if v.queue != w.queue and not tree.borrowing(v.queue, v.total, own_chain):
            continue    # its queue is back at its guarantee: never take it below
        state.release(v)
        chosen.append(v)
        placement = attempt()
        if placement is not None:
            break
    if placement is None:
        for v in reversed(chosen):
            state.restore(v)
        return None, []
    for v in reversed(chosen[:-1]):
        state.restore(v)
        p = attempt()
        if p is not None:
            placement = p
            chosen.remove(v)
        else:
            state.release(v)
    return placement, chosen
