"""Every waiting workload's start estimate from one simulation of the whole line (the plan
Slurm's backfill scheduler makes for ``squeue --start``).

A workload's own estimate (estimate.py) simulates the line ahead of it, so explaining k
workloads costs k simulations, each longer the deeper its workload stands: a user with many
jobs waiting, or the admin's Pending page, paid seconds a look at 15,000 pending
(bench/line_plan.py). The plan simulates the whole line once, with the same engine, and
answers for every workload in it. It also counts what the line ahead leaves out: work behind a
workload that would start first by backfill and take what it waits for, as the engine would
(running work ends at its declared run-time limit, and nothing new arrives).

Held work that runs after other work (``Dependencies.held_lines``) is planned too: each joins
the simulated line once all it runs after has ended there, behind the line of now, as its own
estimate has it; and it competes there with the rest of the held work, which its own estimate
leaves out.

Made in the same two steps as an estimate: ``LinePlan(...)`` copies what it reads from the live
state (cheap), ``run()`` simulates on the copies alone, so the service runs it in its worker
thread (``hub_ext/estimates.py``).
"""

from __future__ import annotations

from .estimate import Result, Simulation, workload_copy
from .model import Workload


class LinePlan(Simulation):
    """A simulation of all pending work in ``order`` (the engine's, by default) and of the held
    work in ``held`` (``Dependencies.held_lines``: a held workload -> the live work it runs
    after; none by default) until each has started or the look ahead ends
    (``estimate.MAX_STEPS`` completions)."""

    def __init__(self, sched, now: float, order: list[Workload] | None = None,
                 held: dict[str, list[str]] | None = None):
        order = sched.engine.order() if order is None else order
        held = held or {}
        wl = sched.state.workloads
        super().__init__(sched, now, order, {wid: (workload_copy(wl[wid]), deps) for wid, deps in held.items()})
        self.ids = frozenset(w.id for w in order)
        self.held = frozenset(held)
        self.starts: dict[str, Result] | None = None

    def run(self) -> dict[str, Result]:
        """Workload id -> (start time or None, how the estimate was made, what held it back in
        the first simulated cycle, whether it would start on borrowed capacity), for every
        workload in the line and every held one planned; once: a second call answers the same."""
        if self.starts is None:
            self.starts = self.simulate(set(self.ids | self.held))
        return self.starts
