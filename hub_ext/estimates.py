"""Start estimates off the service's event loop.

Explaining waiting work (its position, reason and ETA: ``GET workloads/{id}``, the event
stream, the landing and Pending pages) and trying a change (``PATCH …?dry_run=true``) each need
a simulation of the line ahead: about a second for work deep in a line of 15,000. Made on the
event loop, that second was one in which the service answered nobody, a submission or the
spawner's long poll included (bench/loop_lag.py). Here the loop takes only what the simulation
reads from the live state (copies: ``scheduler/estimate.py``) and one worker thread simulates,
so the loop goes on answering meanwhile. One thread, because a simulation is pure Python: a
second would only split the same core while doubling what waits on the loop's turn.

An explanation is made at most once a cycle per workload, and at most one is in the making
for a workload at a time: whoever asks while it is made waits for the same one. One that took
long to make is kept beyond its cycle, for ``estimate_reuse`` times as long as it took (its
``eta_seconds`` counted again from now): held work behind a line of 15,000 takes seconds to
estimate, and redoing that each cycle would keep the thread from everyone else's.

Waiting work that was in line at the last cycle is explained from the line's plan instead
(``scheduler/line_plan.py``): one simulation of the whole line answers for all of it, so a user
with many jobs, the event stream and the admin's Pending page cost one simulation, not one each
(bench/line_plan.py). A plan is kept as an explanation is (its cycle, or ``estimate_reuse`` times
as long as it took), and remade in the background once half of that has passed while people
ask, so they are answered from the one before meanwhile. Work new in line since the plan was
made gets its own estimate until the next plan includes it. Held work that runs after other
work is in the plan too (from when what it runs after ends), so it needs no estimate of its own.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from scheduler.estimate import Steps
from scheduler.explain import explain_planned, explain_steps
from scheduler.line_plan import LinePlan
from scheduler.model import HELD, HOLD, PENDING


class Estimates:
    def __init__(self, service):
        self.service = service
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="computehub-estimate")
        self._kept: dict[str, Kept] = {}
        self.plan: Plan | None = None               # the latest line plan made
        self._planning: Plan | None = None          # the one being made (its starts a future)

    async def settle(self, steps: Steps):
        """Drive a generator of estimates (``explain_steps``, ``preview_steps``): what it does
        between them runs here, on the loop; each estimate's simulation in the worker thread.
        Returns (its value, the seconds its simulations took)."""
        loop = asyncio.get_running_loop()
        took = 0.0
        try:
            est = next(steps)
            while True:
                result, seconds = await loop.run_in_executor(self.pool, _timed, est)
                took += seconds
                self.service.metrics.estimate.observe(seconds)
                est = steps.send(result)
        except StopIteration as done:
            return done.value, took

    async def explanation(self, w) -> dict:
        """``w``'s explanation: from a fresh line plan that includes it; else this cycle's own, the
        one being made, one still fresh for what it cost (``estimate_reuse``), or a new one."""
        if self._plannable(w):
            e = await self.planned(w)
            if e is not None:
                return e
        return await self.unplanned(w)

    async def unplanned(self, w) -> dict:
        """``w``'s explanation where the line plan has none (``planned`` answered None): its own
        estimate, and a line plan started after it when a plan would answer for ``w``."""
        return await self.own(w, plan_after=self._plannable(w))

    def _plannable(self, w) -> bool:
        """Whether a line plan made now would answer for ``w``: work in line at the last cycle,
        and held work that runs after other work (unless something it waits on can give no
        estimate: ``Dependencies.held_lines``)."""
        if w.state == HELD:
            return bool(w.after) and HOLD not in w.metadata
        return w.state == PENDING and w.id in self.service.positions

    async def own(self, w, plan_after: bool = False) -> dict:
        """``w``'s explanation by its own estimate (the line ahead of it): this cycle's, the one being
        made, one still fresh for what it cost (``estimate_reuse``), or a new one. A dry run compares
        with this, simulated the same way. ``plan_after``: start a line plan after it, if none is fresh."""
        svc = self.service
        k = self._kept.get(w.id)
        if k is None or (k.future.done() and (k.state != w.state or not self._fresh(k))):
            k = self._kept[w.id] = Kept(svc.cycles, w.state, time.monotonic(), asyncio.ensure_future(self._explain(w)))
        if plan_after and (self.plan is None or not self._plan_fresh(self.plan)):
            self._start_plan()          # after its own estimate, in the one worker thread
        e, _ = await asyncio.shield(k.future)
        if e.get("eta") is not None:        # kept a while: its seconds count from now
            e = {**e, "eta_seconds": max(0.0, e["eta"] - svc.sched.clock())}
        if k.cycle != svc.cycles and "position" in e and w.id in svc.positions:
            # Kept from an earlier cycle (estimate_reuse): its place in line is this cycle's.
            (pos, in_queue), (total, per_queue) = svc.positions[w.id], svc.line_lengths
            e = {**e, "position": pos, "position_in_queue": in_queue, "pending": total,
                 "queue_length": per_queue.get(w.queue, in_queue)}
        return e

    async def planned(self, w) -> dict | None:
        """``w``'s explanation from a fresh line plan that answers for it (``Plan.answers``), or from
        the one being made (unless ``w`` has a fresh explanation of its own); None otherwise."""
        svc = self.service
        p = self.plan
        if p is not None and self._plan_fresh(p) and p.answers(w):
            if p.cycle != svc.cycles and time.monotonic() - p.at >= svc.estimate_reuse * p.took / 2:
                self._start_plan()          # keep one fresh for whoever asks next
        else:
            q, k = self._planning, self._kept.get(w.id)
            own = k is not None and (not k.future.done() or (k.state == w.state and self._fresh(k)))
            if q is None or not q.answers(w) or own:
                return None
            p = await asyncio.shield(q.future)
        result = p.starts.get(w.id) if p is not None and p.answers(w) else None
        if result is not None and w.state == HELD:
            return explain_planned(svc.sched, w, svc.sched.clock(), result)
        place = svc.positions.get(w.id)
        if result is None or place is None:
            return None
        (pos, in_queue), (total, per_queue) = place, svc.line_lengths
        return explain_planned(svc.sched, w, svc.sched.clock(), result, {
            "position_in_queue": in_queue, "queue_length": per_queue.get(w.queue, in_queue),
            "position": pos, "pending": total})

    def _plan_fresh(self, p: "Plan") -> bool:
        return p.cycle == self.service.cycles or time.monotonic() - p.at < self.service.estimate_reuse * p.took

    def _start_plan(self) -> None:
        """Start a line plan of this cycle's line, unless one is being made; its simulation runs in
        the worker thread after whatever estimate was asked for before it."""
        if self._planning is not None:
            return
        svc = self.service
        pending = svc.sched.state.pending
        order = [pending[i] for i in svc.line_order if i in pending]
        plan = LinePlan(svc.sched, svc.sched.clock(), order, svc.sched.held_lines())
        p = self._planning = Plan(svc.cycles, time.monotonic(), 0.0, plan.ids, None, held=plan.held)
        p.future = asyncio.ensure_future(self._make_plan(p, plan))

    async def _make_plan(self, p: "Plan", plan: LinePlan) -> "Plan | None":
        loop = asyncio.get_running_loop()
        try:
            p.starts, p.took = await loop.run_in_executor(self.pool, _timed, plan)
            self.service.metrics.line_plan.observe(p.took)
            self.plan = p
            return p
        except Exception:
            self.service.log.exception("A line plan failed; explanations fall back to their own estimates")
            return None
        finally:
            self._planning = None

    def _fresh(self, k: "Kept") -> bool:
        if k.future.cancelled() or k.future.exception() is not None:
            return False
        took = k.future.result()[1]
        return k.cycle == self.service.cycles or time.monotonic() - k.at < self.service.estimate_reuse * took

    async def _explain(self, w) -> tuple[dict, float]:
        try:
            return await self.settle(explain_steps(self.service.sched, w, self.service.sched.clock()))
        except BaseException:
            self._kept.pop(w.id, None)      # the next one asks again
            raise

    def new_cycle(self) -> None:
        """Forget explanations the cycle made stale: those already made, unless still fresh for
        what they cost; those still being made are kept until they are done, so that no second
        one starts beside them."""
        self._kept = {i: k for i, k in self._kept.items() if not k.future.done() or self._fresh(k)}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _timed(est):
    """In the worker thread: the estimate (or line plan), and the seconds its simulation took (not
    counting the time it waited for the thread behind others)."""
    t0 = time.perf_counter()
    return est.run(), time.perf_counter() - t0


@dataclass
class Kept:
    cycle: int                  # the cycle it was asked for in
    state: str                  # the workload's state then (one that has changed since is made again)
    at: float                   # when it was asked for (time.monotonic)
    future: asyncio.Future      # (the explanation, seconds its simulation took)


@dataclass
class Plan:
    cycle: int                  # the cycle whose line it plans
    at: float                   # when it was started (time.monotonic)
    took: float                 # seconds its simulation took
    ids: frozenset              # the workloads in that line
    future: asyncio.Future | None
    starts: dict | None = None  # workload id -> its result (scheduler/line_plan.py)
    held: frozenset = frozenset()   # the held workloads it plans (they run after other work)

    def answers(self, w) -> bool:
        """Whether this plan answers for ``w`` as it is now: in the line it planned and still
        pending, or held work it planned that is still held and not by a hold."""
        if w.state == HELD:
            return w.id in self.held and HOLD not in w.metadata
        return w.state == PENDING and w.id in self.ids
