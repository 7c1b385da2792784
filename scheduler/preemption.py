"""Where preemption and reclaim victims are chosen.

Who may be a victim of pending workload ``w`` (all must be preemptible and
have run at least their class's ``preempt_after``):

* work of lower rank in ``w``'s own queue, and work of its own rank there whose
  declared time left is more than ``longer`` seconds (``preempt_for_shorter``
  times ``w``'s own time left) and that has run its class's ``swap_after`` since
  it last started, the most time left first — in a queue above its guarantee
  only while no owed work waits (``swap_borrowed``), and, where it or its class
  says how it checkpoints, only while it would lose at most ``swap_loss``
  seconds of work (``since_checkpoint``): a swap is an improvement, not an
  entitlement, so it waits until its victim has just saved;
* when ``w`` fits in its queue's guarantee (reclaim): work of any rank in
  other queues that are above their guarantee, i.e. borrowed capacity;
* when ``w`` itself borrows: lower-ranked borrowers of other queues.

Victims are tried lower rank first, then borrowers, the least work lost first
(``loss``: since the last checkpoint where the work or its class declares them,
else the youngest), then longer work of ``w``'s own rank (a single-node ``w`` stops a gang only when no
node can be cleared without one: ``victim_nodes.one_node``); once
``w`` fits, victims that turn out unnecessary are given back (oldest first),
so the set is small and young. A queue is never taken below its guarantee by
reclaim: a borrower is only a candidate while its queue is above guarantee.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from heapq import merge
from itertools import islice
from operator import itemgetter

from . import victim_nodes
from .model import STOPPING, PriorityClass, Workload
from .policies import declared_left
from .resources import CPU, GPU, MEMORY, flavor_key


class VictimIndex:
    """Preemptible holders grouped by queue, in preference order, built once per cycle.

    Work admitted in the current cycle is never a victim in that cycle. Work stopped
    during the cycle is dropped by id (``drop``) and skipped when read, so that stopping
    costs nothing per holder: with tens of thousands running, the lists are long.
    """

    def __init__(self, state, now: float):
        self.by_queue: dict[str, list[tuple[tuple, Workload]]] = {}
        for v in state.holding.values():
            if v.state in STOPPING or v.admitted_at is None or v.admitted_at >= now:
                continue
            vc = state.classes.get(v.priority)
            if vc is None or not vc.preemptible or now - v.admitted_at < vc.preempt_after:
                continue
            self.by_queue.setdefault(v.queue, []).append(((vc.rank, loss(v, vc, now), -v.admitted_at, -v.seq), v))
        for lst in self.by_queue.values():
            lst.sort(key=lambda t: t[0])
        self.now = now
        self.gone: set[str] = set()
        self._by_node: dict[str, list[Workload]] | None = None
        self._cuts: dict[tuple[str, int], int] = {}
        # (queue, rank) -> [(-declared time left, key, workload)] sorted, and the same by GPUs held
        self._by_left: dict[tuple[str, int], list[tuple[float, tuple, Workload]]] = {}
        self._by_size: dict[tuple[str, int], dict[int, list[tuple[float, tuple, Workload]]]] = {}
        self.wake_at: float | None = None   # when a victim passed over now may be taken

    def wake(self, when: float) -> None:
        if self.wake_at is None or when < self.wake_at:
            self.wake_at = when

    def drop(self, victims: list[Workload]) -> None:
        self.gone.update(v.id for v in victims)

    def live(self, queue: str):
        """``queue``'s (key, workload) pairs not stopped this cycle, in preference order."""
        gone = self.gone
        return (t for t in self.by_queue.get(queue, ()) if t[1].id not in gone)

    def movable_by_node(self, classes) -> dict[str, list[Workload]]:
        """node -> the one-worker holders there that may be stopped and requeue (work that
        may be moved), the most GPUs first, then oldest submission; built once per cycle:
        the caller skips those in ``gone``."""
        if self._by_node is None:
            self._by_node = {}
            gone = self.gone
            for lst in self.by_queue.values():
                for _, v in lst:
                    if v.workers == 1 and v.id not in gone and classes[v.priority].requeue:
                        self._by_node.setdefault(v.placement[0].node, []).append(v)
            for held in self._by_node.values():
                held.sort(key=lambda v: (-v.request.get(GPU, 0), v.seq))
        return self._by_node

    def eligible(self) -> set[str]:
        """Ids of all holders that may still be stopped this cycle."""
        gone = self.gone
        return {v.id for lst in self.by_queue.values() for _, v in lst if v.id not in gone}

    def rank_cut(self, queue: str, rank: int) -> int:
        """How many of ``queue``'s list rank below ``rank`` (the list is sorted by rank)."""
        cut = self._cuts.get((queue, rank))
        if cut is None:
            cut = self._cuts[(queue, rank)] = bisect_left(self.by_queue[queue], rank, key=_rank_of)
        return cut

    def longer_than(self, queue: str, rank: int, longer: float, assumed: float, min_gpus: int = 0):
        """Workloads of ``queue``'s candidates of class ``rank`` holding at least ``min_gpus``
        GPUs whose declared time left exceeds ``longer`` seconds, the most left first (sorted
        once per cycle; split by GPU count when asked, so that too small work is skipped)."""
        rows = self._by_left.get((queue, rank))
        if rows is None:
            rows = self._by_left[(queue, rank)] = sorted(
                ((-declared_left(v, self.now, assumed), key, v)
                 for key, v in self.by_queue.get(queue, ()) if key[0] == rank), key=_left_then_key)
        if min_gpus <= 0:
            runs = [rows]
        else:
            by_size = self._by_size.get((queue, rank))
            if by_size is None:
                by_size = self._by_size[(queue, rank)] = {}
                for r in rows:      # each part stays in the order of rows
                    by_size.setdefault(r[2].total.get(GPU, 0), []).append(r)
            runs = [part for size, part in by_size.items() if size >= min_gpus]
        runs = [islice(r, bisect_left(r, -longer, key=itemgetter(0))) for r in runs]
        gone = self.gone
        return (v for _, _, v in (runs[0] if len(runs) == 1 else merge(*runs, key=_left_then_key))
                if v.id not in gone)


def candidates(state, index: VictimIndex, w: Workload, cls: PriorityClass,
               longer: float | None = None, assumed: float = 0.0, swap_borrowed: bool = True,
               limit: int | None = None, swap_loss: float = math.inf) -> list[Workload]:
    """``w``'s victims in preference order (module docstring), at most ``limit`` of them.

    Each queue's list is already in preference order, so only the first ``limit`` of each
    are gathered and merged, however many hold GPUs.
    """
    tree = state.tree
    own_chain = tree.chain[w.queue]
    within = tree.within_guarantee(w.queue, w.total) is None
    lower: list = []    # runs of lower-ranked work (own queue, and borrowers), each in order
    higher: list = []   # runs of borrowers of other queues at w's rank or above
    swaps = ()
    for q, lst in index.by_queue.items():
        cut = index.rank_cut(q, cls.rank)
        if q == w.queue:
            lower.append(islice(lst, cut))
            if longer is not None:
                swaps = _swap_victims(state, index, w, cls, longer, assumed, swap_borrowed, swap_loss)
            continue
        if not within and not cls.may_borrow:
            continue
        first = next(index.live(q), None)
        if first is None or not tree.borrowing(q, first[1].total, own_chain):
            continue    # quick look with one holder; choose() checks each victim again
        lower.append(islice(lst, cut))
        if within:
            higher.append(islice(lst, cut, None))
    out = _merged(lower, limit, index.gone)
    if limit is None or len(out) < limit:
        out += _merged(higher, None if limit is None else limit - len(out), index.gone)
    if limit is None or len(out) < limit:
        out += islice(swaps, None if limit is None else limit - len(out))
    return out


def _merged(runs, n: int | None, gone: set[str]) -> list[Workload]:
    """The first ``n`` live workloads of ``runs`` (each sorted by key) in key order: only the
    first ``n`` of each run, and those stopped this cycle, can be needed, and sorting sorted
    runs is a merge in C."""
    take = None if n is None else n + len(gone)
    rows = [t for run in runs for t in islice(run, take)]
    rows.sort(key=itemgetter(0))
    return list(islice((v for _, v in rows if v.id not in gone), n))


def _swap_victims(state, index: VictimIndex, w: Workload, cls: PriorityClass, longer: float,
                  assumed: float, swap_borrowed: bool, swap_loss: float = math.inf):
    """Work of ``w``'s queue and rank with more than ``longer`` seconds left, lazily."""
    must = {} if swap_borrowed else _must_free(state.tree, w.queue, w.total)
    now = index.now
    for v in index.longer_than(w.queue, cls.rank, longer, assumed, must.get(GPU, 0)):
        if all(v.total.get(k, 0) >= n for k, n in must.items()) and _ran_swap_after(state, v, now) \
                and _loses_at_most(state, index, v, swap_loss):
            yield v


MIN_FIRST_SAVE = 60.0   # a first save sooner after the start says nothing of the cadence (seconds)


def since_checkpoint(v: Workload, cls: PriorityClass, now: float) -> float | None:
    """Seconds of progress ``v`` would lose if stopped now (None where that is not known).
    Exactly the time since its last reported checkpoint of its current run
    (``Workload.checkpointed_at``); else, where it or its class declares ``checkpoint_every``,
    what that cadence implies: each start resumes from a checkpoint (or from the beginning),
    so after the class's ``startup`` seconds the work saves every ``checkpoint_every``
    seconds of the current run. Work that reported checkpoints before but not yet in this
    run, with no cadence declared, loses the whole run after ``startup``. Work not yet
    running loses nothing, nor work that saves when told to stop (``saves_on_stop``: seen
    doing so, or declared by its class)."""
    if saves_on_stop(v, cls):
        return 0.0              # it saves when told to stop: only the restart is lost
    every = _checkpoint_every(v, cls)
    saved = v.checkpointed_at
    if every is None and saved is None:
        return None
    if v.started_at is None:
        return 0.0
    if saved is not None and saved >= v.started_at:
        return max(0.0, now - saved)
    run = now - v.started_at - cls.startup
    if run <= 0:
        return 0.0
    return run if every is None else run % every


def saves_on_stop(v: Workload, cls: PriorityClass | None) -> bool:
    """Does ``v`` save a checkpoint when told to stop: seen doing so, or declared by its class?"""
    return v.saves_on_stop or (cls is not None and cls.saves_on_stop)


def assume_saved(v: Workload, cls: PriorityClass, now: float) -> None:
    """For a look ahead (``explain``): work that reports its checkpoints is taken to have
    saved, at its known interval, up to ``now`` (the reports that would say so are still to
    come). Changes ``v``: call it on copies."""
    saved, every = v.checkpointed_at, _checkpoint_every(v, cls)
    if saved is not None and every and v.started_at is not None and saved >= v.started_at and now > saved:
        v.checkpointed_at = saved + (now - saved) // every * every


def loss(v: Workload, cls: PriorityClass, now: float) -> float:
    """Seconds of work stopping ``v`` now throws away: since its last checkpoint where it or its
    class declares them (``since_checkpoint``), else its whole current run (as if it never saved,
    which makes the least loss the youngest)."""
    lost = since_checkpoint(v, cls, now)
    return now - v.admitted_at if lost is None else lost


def _loses_at_most(state, index: VictimIndex, v: Workload, most: float) -> bool:
    """Would stopping ``v`` now lose at most ``most`` seconds of work? If not, ``index`` notes
    when its next checkpoint makes it so (``VictimIndex.wake_at``)."""
    if most == math.inf:
        return True
    cls = state.classes[v.priority]
    lost = since_checkpoint(v, cls, index.now)
    if lost is None or lost <= most:
        return True
    every = _checkpoint_every(v, cls)
    if every is not None:       # else its next report starts a cycle
        index.wake(index.now + every - lost % every)
    return False


def _checkpoint_every(v: Workload, cls: PriorityClass) -> float | None:
    """How often the workload saves: as seen from its reports, else its own declared
    interval, else its class's, else, after its first report in this run, the time that
    save took from the run's start (training saves every so many steps from each start;
    the next report corrects it). None: not known."""
    every = v.checkpoint_seen_every or v.checkpoint_every or cls.checkpoint_every
    if every is None and v.checkpointed_at is not None and v.started_at is not None:
        first = v.checkpointed_at - v.started_at - cls.startup
        if first >= MIN_FIRST_SAVE:
            return first
    return every


def _rank_of(entry) -> int:
    return entry[0][0]


def _left_then_key(row) -> tuple:
    return row[0], row[1]


def _ran_swap_after(state, v: Workload, now: float) -> bool:
    """Has ``v`` run its class's ``swap_after`` since it last started (its preempt_after,
    which the index already checked, when the class sets none)?"""
    after = state.classes[v.priority].swap_after
    return after is None or now - v.admitted_at >= after


def _must_free(tree, q: str, add: dict) -> dict[str, int]:
    """What a victim of leaf ``q`` must hold, per governed resource, for ``q`` to stay within
    its guarantee with it stopped and ``add`` started. While an owner waits, a swap in a queue
    that borrows would replace borrowed work that has run past its class's preempt_after
    (reclaimable now) with fresh work that may not be preempted yet."""
    g, u, gov = tree.guaranteed[q], tree.usage[q], tree.governed[q]
    return {k: x for k, n in add.items() if k in gov and (x := u.get(k, 0) + n - g.get(k, 0)) > 0}


def is_swap(victim: Workload, by: Workload) -> bool:
    """Was ``victim`` chosen by the rule for shorter work (same queue, same class)?"""
    return victim.queue == by.queue and victim.priority == by.priority


def lost_words(lost: float | None, saves_on_stop: bool = False) -> str:
    """What a preemption threw away, for the victim's owner (nothing where it is not known)."""
    if lost is None:
        return ""
    if saves_on_stop:
        return "; it saves a checkpoint when stopped, so only its restart is lost"
    minutes = round(lost / 60)
    if minutes < 1:
        return "; it had saved a checkpoint less than a minute before"
    if minutes == 1:
        return "; the minute of work since its last checkpoint is lost"
    return f"; the {minutes} minutes of work since its last checkpoint are lost"


def why(victim: Workload, by: Workload) -> str:
    """Why ``victim`` was chosen for ``by``, in words for its owner (candidates' rules)."""
    if victim.metadata.get("moved_for") == by.id:
        if by.workers > 1:
            return ("moved to another node so that a multi-node job could have whole nodes "
                    "(consolidation); it restarts from its checkpoint")
        return ("moved to another node to make room on this one for work its team is owed "
                "(consolidation); it restarts from its checkpoint")
    if victim.queue != by.queue:
        return "its queue was above its guarantee, and borrowed capacity is given back when needed"
    if not is_swap(victim, by):
        return "work of a higher priority class in its queue needed the capacity"
    return "work of its queue and class that declares much less time left goes first (preempt_for_shorter)"


def choose(state, w: Workload, cands: list[Workload], attempt, limit: int):
    """Victims for ``w``: released, with the placement they make possible; or (None, []).

    A single-node workload first looks node by node, with arithmetic only: the
    node that needs the fewest (then most preferred) victims to fit is tried
    first, so the set stays small; a gang likewise looks for the whole nodes it
    lacks (``victim_nodes``). Otherwise, and as a fallback, victims are
    released in preference order across the cluster. Either way, unnecessary
    victims are given back afterwards.
    """
    cands = cands[:limit]
    if not _could_fit(state, w, cands):
        return None, []
    one_node = w.workers == 1
    best = victim_nodes.one_node(state, w, cands) if one_node else victim_nodes.whole_nodes(state, w, cands)
    if best is not None:
        placement, chosen = _greedy(state, w, best, attempt)
        if placement is not None:
            return placement, chosen
    elif one_node and state.inventory.place(w) is None:
        # No node takes w even with all its candidates gone, and releasing work
        # elsewhere changes no other node: trying them one by one cannot succeed.
        return None, []
    return _greedy(state, w, cands, attempt)


def _could_fit(state, w: Workload, cands: list[Workload]) -> bool:
    """Cheap bound: even freeing every candidate, are there enough GPUs of the model?"""
    need = w.request.get(GPU, 0) * w.workers
    if not need:
        return True
    inv = state.inventory
    key = flavor_key(w.gpu_model) if w.gpu_model else GPU
    missing = need - inv.free.get(key, 0)
    for v in cands:
        if missing <= 0:
            break
        for a in v.placement:
            if inv.model_fits(inv.nodes[a.node].spec, w.gpu_model, need):
                missing -= len(a.gpus)
    return missing <= 0


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
