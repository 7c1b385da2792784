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
for a workload at a time: whoever asks while it is made waits for the same one.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from scheduler.estimate import Steps
from scheduler.explain import explain_steps


class Estimates:
    def __init__(self, service):
        self.service = service
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="computehub-estimate")
        self._kept: dict[str, tuple[int, asyncio.Future]] = {}     # workload -> (cycle, its explanation)

    async def settle(self, steps: Steps):
        """Drive a generator of estimates (``explain_steps``, ``preview_steps``): what it does
        between them runs here, on the loop; each estimate's simulation in the worker thread."""
        loop = asyncio.get_running_loop()
        try:
            est = next(steps)
            while True:
                t0 = time.perf_counter()
                result = await loop.run_in_executor(self.pool, est.run)
                self.service.metrics.estimate.observe(time.perf_counter() - t0)
                est = steps.send(result)
        except StopIteration as done:
            return done.value

    async def explanation(self, w) -> dict:
        """``w``'s explanation: this cycle's, the one being made, or a new one."""
        cycle = self.service.cycles
        hit = self._kept.get(w.id)
        if hit is None or (hit[0] != cycle and hit[1].done()):
            hit = self._kept[w.id] = (cycle, asyncio.ensure_future(self._explain(w)))
        return await asyncio.shield(hit[1])

    async def _explain(self, w) -> dict:
        try:
            return await self.settle(explain_steps(self.service.sched, w, self.service.sched.clock()))
        except BaseException:
            self._kept.pop(w.id, None)      # the next one asks again
            raise

    def new_cycle(self) -> None:
        """Forget explanations already made (they describe the cycle before); those still being
        made are kept until they are done, so that no second one starts beside them."""
        self._kept = {k: v for k, v in self._kept.items() if not v[1].done()}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
