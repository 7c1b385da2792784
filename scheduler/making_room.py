"""The engine's steps that make room for blocked work: preemption, consolidation, stopping.

``MakingRoom`` is a part of ``engine.Engine`` (a mixin on the same state and caches): the
walk in ``Engine._admit_in_order`` calls ``_preempt`` for work that a preemption could
help; it takes victims (``preemption``) or, failing that, moves running work to other nodes
(``consolidation``), and stops whatever it chose with ``_stop``.
"""

from __future__ import annotations

from . import consolidation, gang_consolidation, policies, preemption
from .model import PENDING, PREEMPTED, PREEMPTING, STOPPING_SINCE, PriorityClass, Workload
from .resources import GPU

class MakingRoom:
    def _preempt(self, w: Workload, cls: PriorityClass, now: float, reserved, res) -> bool:
        st = self.state
        if self._preempt_failed(w, cls):
            return False
        if self._victims is None:
            self._victims = preemption.VictimIndex(st, now)
        delay = self.config.preemption_delay
        if delay and now - w.eligible_since < delay and st.tree.within_guarantee(w.queue, w.total) is not None:
            self._victims.wake(w.eligible_since + delay)      # replay: look again once it may
            return False
        if self.config.order in policies.SERVICE_ORDERS:
            cfg = self.config
            cands = policies.candidates(self._victims, w, cls, cfg.order, cfg.las_thresholds, st.classes, now)
        else:
            assumed = self.config.assumed_limit
            longer = self.config.preempt_for_shorter * policies.declared_left(w, now, assumed) \
                if self._swaps else None
            cands = preemption.candidates(st, self._victims, w, cls, longer, assumed,
                                          not self._owed_waiting, self.config.max_victims_tried,
                                          self.config.swap_loss)
        if not cands:
            return self._consolidate(w, cls, now, reserved, res)
        saved_cache = self._fail_cache
        self._fail_cache = {True: {}, False: {}}   # capacity changes while victims are tried
        attempt = self._attempt(lambda: self._quota(w) or self._place(w, reserved))
        placement, victims = preemption.choose(st, w, cands, attempt, self.config.max_victims_tried)
        if placement is None:
            self._fail_cache = saved_cache
            return self._consolidate(w, cls, now, reserved, res)
        self._stop(victims, w, now, res)
        self._admit(w, placement, now, res)
        swap = all(preemption.is_swap(v, w) for v in victims)
        if not swap or sum(v.request.get(GPU, 0) * v.workers for v in victims) != w.request.get(GPU, 0) * w.workers:
            # Capacity moved: what failed to fit may fit now. A swap inside one queue and class
            # creates no victims or usage for anyone else, so failed preemptions stay failed
            # for the rest of the cycle (at worst one is tried again in the next cycle).
            self._tail_memo.clear()
            if not swap:
                self._preempt_fail.clear()
        return True

    def _consolidate(self, w: Workload, cls: PriorityClass, now: float, reserved, res) -> bool:
        """Work that preemption could not place: move running work to make room
        (``consolidation``): for owed one-node work, room on one node; for a gang whose
        quotas let it start, the whole nodes it lacks (``gang_consolidation``), also with
        reclaim on them when the gang is owed. Moved work restarts elsewhere at once
        when preempted work frees its resources at once (replay); otherwise it is requeued
        when it has stopped and then goes first (``_first``)."""
        st = self.state
        moves = self.config.consolidation_moves if self.config.order == "priority" else 0
        found = None
        if moves > 0:
            saved_cache, self._fail_cache = self._fail_cache, {True: {}, False: {}}
            if w.workers == 1:
                if st.tree.within_guarantee(w.queue, w.total) is None:
                    found = consolidation.plan(st, self._victims, w, lambda: self._quota(w) is None,
                                               self._attempt(lambda: self._place(w, reserved)), moves, reserved)
            elif self._quota(w) is None:
                place = self._attempt(lambda: self._place(w, reserved))
                found = gang_consolidation.plan_gang(st, self._victims, w, place, moves, reserved)
                if found is None and st.tree.within_guarantee(w.queue, w.total) is None:
                    found = gang_consolidation.plan_owed_gang(st, self._victims, w, lambda: self._quota(w) is None,
                                                              place, moves, reserved)
            self._fail_cache = saved_cache
        if found is None:
            self._note_preempt_failed(w, cls)
            return False
        for v, _ in found.moves:
            v.metadata["moved_for"] = w.id
        self._stop(found.evict + [v for v, _ in found.moves], w, now, res)
        self._admit(w, found.placement, now, res)
        for v, where in found.moves:
            if v.state == PENDING:          # stopped at once: starts again where the plan put it
                self._admit(v, where, now, res)
            else:
                self._first.add(v.id)     # once stopped, to the room left for it
        if not self.config.release_on_preempt:
            self._behind.update((v.id, w.id) for v in found.evict)
        self._tail_memo.clear()
        self._preempt_fail.clear()
        return True

    def _attempt(self, try_once):
        """``try_once`` as preemption tries it: a placement or None, on a fresh failure cache
        each time (capacity changes while victims are tried)."""
        def attempt():
            out = try_once()
            self._fail_cache = {True: {}, False: {}}
            return out if isinstance(out, list) else None
        return attempt

    def _stop(self, victims: list[Workload], w: Workload, now: float, res) -> None:
        """Preempt ``victims`` for ``w``: released at once (replay) or once they have stopped."""
        self._victims.drop(victims)
        classes = self.state.classes
        for v in victims:
            lost = preemption.since_checkpoint(v, classes[v.priority], now)
            if lost is not None:
                res.lost[v.id] = lost
            res.preempted.append((v, w))
            v.preemptions += 1
            v.metadata["preempted_by"] = w.id
            policies.charge(v, now)
        for v in victims:
            if not self.config.release_on_preempt:
                v.state = PREEMPTING      # still holds its resources until it has stopped
                v.metadata[STOPPING_SINCE] = now
                self._leaving.add(v)
            elif (c := self.state.classes.get(v.priority)) is not None and c.requeue:
                self.state.requeue(v, now)    # back in line, keeping its age
            else:
                v.state = PREEMPTED
