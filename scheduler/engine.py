"""Where a scheduling cycle happens: order pending work, admit, preempt, backfill.

The engine is deterministic given (state, clock): the live service and trace
replay drive the same ``Engine.cycle``. It changes the in-memory state and
returns what it decided; the caller (``core.Scheduler``) makes that durable.
"""

from __future__ import annotations

import gc
import math
import time as _time
from dataclasses import dataclass, field
from types import SimpleNamespace

from . import admission, arrays, backfill, ordering, policies, preemption
from .backfill import Reservation
from .blockers import (ARRAY_LIMIT, CAPACITY, GUARANTEE_ONLY, LENDING, MADE_ROOM, NO_BORROW, QUEUE_LIMIT,
                       RESERVED, STRICT_ORDER, USER_LIMIT, WAITING_PREEMPTION, Blocker)
from .config import EngineConfig
from .fairshare import FairShare
from .leaving import Leaving
from .making_room import MakingRoom
from .model import ADMITTED, STOPPING, PriorityClass, Workload, leaving
from .resources import CPU, GPU, MEMORY
from .state import ClusterState

# Blockers that preempting someone could lift.
_UNKNOWN = object()      # a memo's "not looked up yet"
_PREEMPTION_HELPS = {CAPACITY, QUEUE_LIMIT, USER_LIMIT, GUARANTEE_ONLY, NO_BORROW, LENDING}


@dataclass
class CycleResult:
    now: float
    admitted: list[Workload] = field(default_factory=list)
    preempted: list[tuple[Workload, Workload]] = field(default_factory=list)  # (victim, by)
    blockers: dict[str, Blocker] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    seconds: float = 0.0
    # The earliest time a decision may change with nothing else happening: a swap waited for
    # its victim's next checkpoint (EngineConfig.swap_loss). Trace replay wakes up then.
    wake_at: float | None = None
    # Victim id -> seconds of work its stop throws away, where it declares checkpoints.
    lost: dict[str, float] = field(default_factory=dict)


class Engine(MakingRoom):
    """One scheduling cycle's decisions; preemption and consolidation are ``MakingRoom``'s."""

    def __init__(self, state: ClusterState, config: EngineConfig | None = None):
        self.state = state
        self.config = config or EngineConfig()
        self.fairshare = FairShare(self.config.half_life)
        self._leaving = Leaving()
        self._nominated: list[Workload] = []
        # Within one cycle: placement shape -> Blocker, for placements that ignore
        # reservations (True) and that respect them (False).
        self._fail_cache: dict[bool, dict] = {True: {}, False: {}}
        self._shapes: dict[str, tuple] = {}
        self._preempting = self.config.preemption
        # Within one cycle: preemption keys that found no victims -> the smallest time-left
        # bucket that failed (work with more time left has fewer victims: it fails too).
        self._preempt_fail: dict = {}
        self._swaps = False     # each cycle: is preemption for shorter work (preempt_for_shorter) on?
        self._victims: preemption.VictimIndex | None = None
        self._now = 0.0     # the current cycle's clock, for orders that depend on service received
        self._owed_waiting = False   # within a cycle: owed work was found waiting for capacity
        # Workload ids that go first in the next cycle they are pending in: nominated work and
        # work moved to make room for it (in memory: after a restart the usual order applies).
        self._first: set[str] = set()
        # Reclaim victims of a consolidation (live mode) -> the owed workload: they wait until it
        # has started, so that they do not take the room planned for the work moved for it.
        self._behind: dict[str, str] = {}
        # Within one cycle, once a capped array's task is met: tasks holding an allocation per array.
        self._array_tasks: dict | None = None

    # --- ordering -------------------------------------------------------------

    def order(self, pending: dict[str, Workload] | None = None) -> list[Workload]:
        """Pending work in admission order (see ``ordering.pending_order``); ``pending``: another
        line, ordered as this one would be (a change tried before it is made: what_if.py)."""
        st = self.state
        if pending is not None:
            st = SimpleNamespace(pending=pending, inventory=st.inventory, tree=st.tree, classes=st.classes)
        return ordering.pending_order(st, self.config, self.fairshare, self._now, self._first)

    # --- one cycle ------------------------------------------------------------

    def cycle(self, now: float) -> CycleResult:
        # A cycle allocates many small tuples; with tens of thousands of workloads alive,
        # the cyclic garbage collector would rescan them all mid-cycle. It runs after.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._cycle(now)
        finally:
            if was_enabled:
                gc.enable()

    def _cycle(self, now: float) -> CycleResult:
        t0 = _time.perf_counter()
        st, cfg = self.state, self.config
        self._now = now
        self.fairshare.advance(now, st.tree)
        order = self.order()
        if self._first:      # they go first for one cycle (and ended work is forgotten)
            self._first.difference_update([i for i in self._first if i in st.pending or i not in st.workloads])
        if self._behind:
            self._behind = {v: o for v, o in self._behind.items() if o in st.pending and v in st.workloads}
        res = CycleResult(now=now, order=[w.id for w in order])
        self._fail_cache = {True: {}, False: {}}
        self._preempting = cfg.preemption
        if len(self._shapes) > 2 * len(st.pending) + 1000:
            self._shapes = {}
        self._preempt_fail = {}
        self._swaps = cfg.preempt_for_shorter > 0 and cfg.order == "priority"
        self._tail_memo: dict = {}
        self._owed_memo: dict = {}
        self._victims = None
        self._owed_waiting = False
        self._array_tasks = None
        # Work being preempted is treated as gone for this cycle; whatever lands on
        # what it still holds is only nominated, and starts once it has stopped.
        self._leaving = Leaving()
        for v in [v for v in st.holding.values() if v.state in STOPPING and leaving(v)]:
            st.release(v)
            self._leaving.add(v)
        self._nominated: list[Workload] = []
        try:
            self._admit_in_order(order, now, res)
        finally:
            for w in self._nominated:
                st.release(w)
                st.requeue(w)
            for v in self._leaving.workloads:
                st.restore(v)
                st.tree.mark_leaving(v.queue, v.total, 1)
        if self._victims is not None:
            res.wake_at = self._victims.wake_at
        res.seconds = _time.perf_counter() - t0
        return res

    def _admit_in_order(self, order: list[Workload], now: float, res: CycleResult) -> None:
        st, cfg = self.state, self.config
        backfill_mode, n_reservations, preempt = cfg.backfill, cfg.reservations, cfg.preemption
        reserved: dict = {}
        shadow: float | None = math.inf
        strict: Workload | None = None
        # Some blocked work holds no reservation at all (may_reserve). A reservation never holds
        # back work another queue is owed (within its guarantee), and one for work larger than its
        # queue's whole guarantee (it can only ever borrow) holds back no owed work at all. Nor does
        # one whose holder would have to borrow now (its queue's usage plus its request is beyond
        # the guarantee) while other queues borrow: that would keep its own team below its
        # guarantee, the difference lent out, for a job that is not owed.
        rsv_queues: set[str] = set()
        # The walk reaches every pending workload; most of a long tail ends at a remembered
        # verdict, so what it looks up on the way is bound to locals here.
        classes, blockers, shapes, shape_of = st.classes, res.blockers, self._shapes, self._shape
        owed_memo, tail_memo, within = self._owed_memo, self._tail_memo, st.tree.within_guarantee
        behind = self._behind
        for w in order:
            if strict is not None:
                blockers[w.id] = Blocker(STRICT_ORDER, other=strict.id)
                continue
            if behind and w.id in behind:
                owed = st.workloads[behind[w.id]]
                blockers[w.id] = Blocker(MADE_ROOM, queue=owed.queue, other=owed.id)
                continue
            if w.array is not None and w.array["limit"] and self._array_full(w, blockers):
                continue
            cls = classes[w.priority]
            shape = shapes.get(w.id) or shape_of(w)
            if not res.reservations or (
                    w.time_limit is not None and shadow is not None and now + w.time_limit <= shadow):
                use_reserved = True
            elif w.queue in rsv_queues:
                use_reserved = False
            else:
                okey = (w.queue, shape)
                owed = owed_memo.get(okey, _UNKNOWN)
                if owed is _UNKNOWN:
                    owed = owed_memo[okey] = within(w.queue, w.total)
                use_reserved = owed is None
            rsv = None if use_reserved else reserved
            settled = backfill_mode == "skip" or len(res.reservations) >= n_reservations
            if settled:
                failed = tail_memo.get((w.queue, cls.rank, shape, use_reserved))
                if failed is not None:
                    # Noted (_note_blocked) when the verdict was remembered; until a preemption
                    # empties the memo its queue's usage has only grown: not owed then, not now.
                    blockers[w.id] = failed
                    continue
                if self._known_to_fail(w, cls, shape, rsv, res):
                    continue
            out = self._quota(w)
            if out is None:     # work that may use reserved capacity goes elsewhere if it fits there
                steer = self._place(w, reserved) if rsv is None and reserved else None
                out = steer if isinstance(steer, list) else self._place(w, rsv)
            if rsv and isinstance(out, Blocker) and out.code == CAPACITY:
                if isinstance(self._place(w, None), list):
                    holder = res.reservations[0].workload
                    out = Blocker(RESERVED, queue=holder.queue, other=holder.id)
            if not isinstance(out, Blocker):
                self._admit(w, out, now, res)
                continue
            if preempt and out.code in _PREEMPTION_HELPS and self._preempt(w, cls, now, rsv, res):
                continue
            res.blockers[w.id] = out
            if not self._owed_waiting:
                self._note_blocked(w, out)
            if out.code in (CAPACITY, RESERVED):
                if backfill_mode == "none":
                    strict = w
                elif backfill_mode == "reserve" and len(res.reservations) < n_reservations \
                        and out.code == CAPACITY and self.may_reserve(w, now):
                    r = backfill.reserve(st.inventory, list(st.holding.values()), w, now, reserved)
                    res.reservations.append(r)
                    tree = st.tree
                    if not any(v > tree.guaranteed[w.queue].get(k, 0) for k, v in w.total.items()
                               if k in tree.governed[w.queue]) and (
                            within(w.queue, w.total) is None or not tree.others_borrow(w.queue)):
                        rsv_queues.add(w.queue)
                    backfill.merge(reserved, r.nodes)
                    shadow = None if (shadow is None or r.shadow is None) else min(shadow, r.shadow)

    def may_reserve(self, w: Workload, now: float) -> bool:
        """May blocked ``w`` hold a backfill reservation? Not when it is larger than its queue's
        whole guarantee while other queues are guaranteed GPUs (``QueueTree.borrows_only``): it
        only ever runs on what they leave free, and holding nodes idle for it keeps them from
        work that could run. Unless consolidation is off: then a reservation is what lets a
        gang's nodes empty at all. Or once it has waited long for its size in time
        (``oversize_reservation_stretch``): otherwise it could wait for good."""
        cfg = self.config
        if not (cfg.consolidation_moves > 0 and cfg.order == "priority"
                and self.state.tree.borrows_only(w.queue, w.total)):
            return True
        return self.reserves_oversize_after(w) <= now

    def reserves_oversize_after(self, w: Workload) -> float:
        """When work larger than its queue's guarantee may hold a reservation: once its expansion
        factor reaches ``oversize_reservation_stretch`` (infinite when that is 0)."""
        stretch = self.config.oversize_reservation_stretch
        if stretch <= 0:
            return math.inf
        return w.eligible_since + (stretch - 1) * (w.time_limit or self.config.assumed_limit)

    def _known_to_fail(self, w: Workload, cls: PriorityClass, shape: tuple, rsv, res: CycleResult) -> bool:
        """Fast path for a long tail of pending work: its shape already failed to place
        and preemption already failed for its kind, so it cannot start this cycle
        whatever its quota says (``explain`` refines the reason on demand).

        A verdict is remembered per queue, rank, shape and reservation use until a
        preemption succeeds: only that empties the caches it rests on (admissions and
        new reservations take capacity, so what failed keeps failing). The walk looks
        the remembered verdict up itself before calling this."""
        tail_key = (w.queue, cls.rank, shape, rsv is None)
        failed = self._fail_cache[rsv is None].get(shape)
        if failed is None:
            return False
        if rsv is not None and self._fail_cache[True].get(shape) is None:
            return False    # might be held back only by the reservation: take the full path
        if self._preempting and not self._preempt_failed(w, cls):
            return False
        self._tail_memo[tail_key] = failed
        res.blockers[w.id] = failed
        if not self._owed_waiting:
            self._note_blocked(w, failed)
        return True

    def _note_blocked(self, w: Workload, blocker: Blocker) -> None:
        """Remember, for the rest of the cycle, that work its queue is owed (it fits in the
        queue's guarantee) waits for capacity: queues that borrow then stop swapping their
        reclaimable borrowed work for fresh work (see preemption.candidates)."""
        if blocker.code in (CAPACITY, RESERVED):
            okey = (w.queue, self._shape(w))        # the walk's memo: one guarantee check per shape
            if okey not in self._owed_memo:
                self._owed_memo[okey] = self.state.tree.within_guarantee(w.queue, w.total)
            self._owed_waiting = self._owed_waiting or self._owed_memo[okey] is None

    def _shape(self, w: Workload) -> tuple:
        """What placement depends on; workloads of one shape fit or fail alike (cached)."""
        s = self._shapes.get(w.id)
        if s is None:
            r, sel = w.request, w.node_selector
            s = (w.gpu_model, w.workers, r.get(GPU, 0), r.get(CPU, 0), r.get(MEMORY, 0),
                 tuple(sorted(sel.items())) if sel else ())
            if self._swaps:
                # Which victims it may take depends on its time left. Work whose time left is
                # within the same power of the factor shares the cycle's per-shape verdicts: a
                # swap the shared verdict hides waits at most until the next cycle.
                left = policies.declared_left(w, self._now, self.config.assumed_limit)
                s += (math.floor(math.log(max(left, 60.0), self.config.preempt_for_shorter)),)
            self._shapes[w.id] = s
        return s

    def _preempt_key(self, w: Workload, cls: PriorityClass) -> tuple[tuple, int]:
        """(what preemption for ``w`` depends on, its time-left bucket or 0)."""
        shape = self._shape(w)
        if self._swaps:
            return (w.queue, cls.rank, shape[:-1]), shape[-1]
        return (w.queue, cls.rank, shape), 0

    def _preempt_failed(self, w: Workload, cls: PriorityClass) -> bool:
        key, bucket = self._preempt_key(w, cls)
        failed = self._preempt_fail.get(key)
        return failed is not None and bucket >= failed

    def _note_preempt_failed(self, w: Workload, cls: PriorityClass) -> None:
        key, bucket = self._preempt_key(w, cls)
        failed = self._preempt_fail.get(key)
        if failed is None or bucket < failed:
            self._preempt_fail[key] = bucket

    def _array_full(self, w: Workload, blockers: dict) -> bool:
        """Whether ``w``'s array already has as many tasks holding an allocation as its cap: then it
        waits, reserving nothing and preempting no one (``arrays``)."""
        if self._array_tasks is None:
            self._array_tasks = arrays.holding_by_array(self.state.holding.values())
        array = w.array
        running = self._array_tasks[array["id"]]
        if running < array["limit"]:
            return False
        blockers[w.id] = Blocker(ARRAY_LIMIT, other=array["id"], used=running, cap=array["limit"])
        return True

    def _admit(self, w: Workload, placement, now: float, res: CycleResult) -> None:
        self.state.allocate(w, placement, now, ADMITTED)
        if w.array is not None and self._array_tasks is not None:
            self._array_tasks[w.array["id"]] += 1
        self._owed_memo.clear()      # in place: the cycle's walk holds it
        waits = self._leaving.relied_on(self.state.inventory, placement) or \
            self._leaving.quota_relied_on(self.state, w)
        if waits:
            self._nominated.append(w)
            res.blockers[w.id] = Blocker(WAITING_PREEMPTION, need=waits)
            # Once its victims have stopped it goes first, before they race it for the room.
            self._first.add(w.id)
        else:
            res.admitted.append(w)

    # --- admission checks -----------------------------------------------------

    def _quota(self, w: Workload) -> Blocker | None:
        return admission.quota_blocker(self.state, w)

    def _place(self, w: Workload, reserved) -> list | Blocker:
        """A placement for every worker of ``w``, or why there is none (cached per shape)."""
        st = self.state
        shape = self._shape(w)
        cache = self._fail_cache[reserved is None]
        failed = cache.get(shape)
        if failed is not None:
            return failed
        placement = st.inventory.place(w, reserved)
        if placement is not None:
            return placement
        blocker = admission.capacity_blocker(st.inventory, w)
        cache[shape] = blocker
        return blocker
