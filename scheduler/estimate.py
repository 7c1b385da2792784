"""Start estimates that can run away from the live state (Slurm's ``squeue --start``).

An estimate is a forward simulation with the same engine on a copy of the state: running work
ends at its declared run-time limit, pending work ahead is admitted as the engine would. It is
the costly part of explaining waiting work (about a second for work deep in a line of 15,000:
bench/loop_lag.py), so it is made in two steps: ``Estimate(...)`` copies what it needs from the
live state (cheap; wherever the caller runs the scheduler), and ``run()`` simulates on the copy
alone, so the service runs it in a worker thread while its event loop goes on answering
(``hub_ext/estimates.py``).

What asks for estimates (``explain.explain_steps``, ``what_if.preview_steps``) is written as a
generator: it yields each ``Estimate`` and is sent its result. ``settle`` drives one where it
stands; the service's driver runs each estimate in its worker thread instead. So the scheduler
stays free of any event loop, and both give the same answers.
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from typing import Any

from . import preemption
from .backfill import expected_end
from .blockers import Blocker
from .engine import Engine
from .model import HELD, PENDING, TERMINAL, Workload
from .state import ClusterState

MAX_STEPS = 500

# (start time or None, how the estimate was made, what held it back in the first simulated
# cycle, whether it would start on borrowed capacity)
Result = tuple[float | None, str, Blocker | None, bool]
Steps = Generator["Estimate", Result, Any]


def settle(steps: Steps):
    """Run a generator of estimates to its end, each estimate here and now; its return value."""
    try:
        est = next(steps)
        while True:
            est = steps.send(est.run())
    except StopIteration as done:
        return done.value


def eta_fields(eta: float | None, why: str, borrows: bool, now: float) -> dict:
    """An explanation's start estimate: ``eta``, ``eta_seconds`` (from ``now``), ``eta_earliest``
    (a lower bound: it would start on borrowed GPUs, later than now) and ``eta_reason``."""
    return {"eta": eta, "eta_seconds": None if eta is None else max(0.0, eta - now),
            "eta_earliest": bool(borrows and eta is not None and eta > now), "eta_reason": why}


def estimate_start(sched, target: Workload, now: float, order=None) -> Result:
    """Simulate forward until ``target`` is admitted (both steps at once)."""
    return Estimate(sched, target, now, order).run()


class Simulation:
    """Copies of what a look ahead reads, made when it is made: the live state may change
    (another cycle, a cancellation) while ``simulate`` goes on, and ``simulate`` never touches it.

    ``line``: the pending work simulated (in the engine's order); ``waiting``: held work and what
    it runs after (``Dependencies.dependency_chain``): each joins the simulated line once all it
    runs after has ended there (as if it finished), behind the whole line of now."""

    def __init__(self, sched, now: float, line: list[Workload], waiting: dict[str, tuple[Workload, list[str]]]):
        st = sched.state
        self.now, self.waiting, self.held_ids = now, waiting, frozenset(waiting)
        # Copies only, here: building the simulated cluster from them (charging each to its
        # nodes and queues) is left to ``simulate``, which may run elsewhere.
        self.specs = ([copy.copy(q) for q in st.tree.specs.values()], [copy.copy(c) for c in st.classes.values()],
                      [copy.copy(n.spec) for n in st.inventory.nodes.values()])
        self.copies: dict[str, Workload] = {w.id: workload_copy(w) for w in list(st.holding.values()) + line}
        self.cfg = sched.config.copy(release_on_preempt=True)
        fs = sched.engine.fairshare
        self.fairshare = (fs.time, {k: dict(v) for k, v in fs.usage.items()})

    def simulate(self, watched: set[str]) -> dict[str, Result]:
        """Simulate (on the copies only) until every workload in ``watched`` has started: when,
        and why then, for each."""
        clone = ClusterState(*self.specs)
        for c in self.copies.values():
            clone.add(c)
        eng = Engine(clone, self.cfg)
        eng.fairshare.load(*self.fairshare)
        delay = self.cfg.preemption_delay
        mine = {i: self.copies.get(i) or self.waiting[i][0] for i in watched}
        delay_ends = {i: c.eligible_since + delay for i, c in mine.items()} if delay else {}
        ending_delays = set(delay_ends.values())
        now, out, left = self.now, {}, set(watched)
        t, first, woke = now, {}, False
        self._join(clone, t)
        for step in range(MAX_STEPS):
            res = eng.cycle(t)
            if step == 0:
                first = res.blockers
            for me in res.admitted:
                if me.id in left:
                    left.discard(me.id)
                    out[me.id] = (t, self._why(me, t, woke and t == delay_ends.get(me.id), woke, res),
                                  first.get(me.id), clone.tree.borrowing(me.queue, me.total))
            if not left:
                return out
            ends = [(e, v) for v in clone.holding.values() if (e := expected_end(v, t)) is not None]
            if not ends:
                unknown = len(clone.holding)
                why = (f"unknown: {unknown} running workload(s) ahead declare no run-time limit"
                       if unknown else "unknown: nothing running frees what it needs")
                return out | {i: (None, why, first.get(i), False) for i in left}
            nxt = min(e for e, _ in ends)
            woke = res.wake_at is not None and t < res.wake_at < nxt
            if woke:
                t = res.wake_at         # a swap waits for its victim's checkpoint (or the delay), nothing ends first
                if t not in ending_delays:
                    for v in clone.holding.values():
                        preemption.assume_saved(v, clone.classes[v.priority], t)
                continue
            t = nxt
            for e, v in ends:
                if e <= t:
                    clone.release(v)
                    v.state = TERMINAL[0]
                    clone.workloads.pop(v.id, None)
            self._join(clone, t)
        return out | {i: (None, f"beyond the next {MAX_STEPS} completions", first.get(i), False) for i in left}

    def _why(self, me: Workload, t: float, delay_ended: bool, woke: bool, res) -> str:
        """Why ``me`` would start at ``t``, as the estimate says it."""
        if t == self.now:
            return "now"
        if delay_ended and res.preempted:
            return (f"once it has waited {self.cfg.preemption_delay:g} s (the preemption delay), "
                    "by preempting running work")
        swapped = [v for v, by in res.preempted if by is me and v.queue == me.queue] if woke else []
        if swapped:
            return (f"when {me.queue} workload {swapped[0].id}, which declares much more time left, "
                    "has saved its next checkpoint and gives way")
        if me.id in self.held_ids:
            return ("if what it runs after finishes by its declared time limit (and other running work "
                    "ends at its own)")
        return "if running work ends at its declared time limit"

    def _join(self, clone: ClusterState, t: float) -> None:
        """Held work all of whose dependencies have ended in the simulation joins its line, its
        wait counted from ``t`` (``Dependencies.join_line``)."""
        for wid, (c, deps) in list(self.waiting.items()):
            if not any(d in clone.workloads or d in self.waiting for d in deps):
                del self.waiting[wid]
                c.state, c.reason, c.eligible_at = PENDING, "", t
                clone.add(c)


class Estimate(Simulation):
    """A simulation until ``target`` is admitted, over the line ahead of it (``Simulation``).

    Held ``target`` (it runs after other work) is estimated with ``held``, its chain
    (``Dependencies.dependency_chain``), behind the whole line of now."""

    def __init__(self, sched, target: Workload, now: float, order=None, held: dict[str, list[str]] | None = None):
        st = sched.state
        order = sched.engine.order() if order is None else order
        ids = [w.id for w in order]
        self.target_id = target.id
        in_line = target.id in ids or (target.state == HELD and held is not None)
        self.result: Result | None = None if in_line else (None, "not pending", None, False)
        if self.result is not None:
            return
        waiting = {}
        if target.state == HELD:
            ahead = order
            # ``target`` itself may be a changed copy (a dry run: what_if.py), not the live one.
            waiting = {wid: (workload_copy(target if wid == target.id else st.workloads[wid]), deps)
                       for wid, deps in held.items()}
        else:
            ahead = order[: ids.index(target.id) + 1]
        super().__init__(sched, now, ahead, waiting)

    def run(self) -> Result:
        """Simulate (on the copies only); once: a second call answers the same."""
        if self.result is None:
            self.result = self.simulate({self.target_id})[self.target_id]
        return self.result


def workload_copy(w: Workload) -> Workload:
    """A copy the simulation may change: what it changes in place (placement, metadata) copied
    too. (``copy.copy`` of a slotted dataclass goes through ``__reduce_ex__``: twice as slow, over
    thousands of workloads each time.)"""
    c = object.__new__(Workload)
    for name in _FIELDS:
        setattr(c, name, getattr(w, name))
    c.placement = list(w.placement)
    c.metadata = dict(w.metadata)
    return c


_FIELDS = Workload.__slots__
