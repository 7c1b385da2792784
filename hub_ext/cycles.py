"""The service's scheduling loop: when a cycle runs (after a change, paced under a burst, at
least every ``cycle_interval``, and when held work's begin time comes), and what each cycle leaves
for explanations (every pending workload's place in line, the line itself). Mixed into
``ComputeHubService``."""

from __future__ import annotations

import asyncio
import time

from traitlets import Float, HasTraits

from scheduler.errors import StoreUnavailable
from scheduler.store.exclusive import LostExclusivity


class SchedulingLoop(HasTraits):
    """Needs ``sched``, ``estimates``, ``metrics``, ``audit``, ``log`` and the loop's events."""

    cycle_interval = Float(5.0, config=True, help="Seconds between periodic scheduling cycles (above 0); held "
                                                  "work's begin time brings one sooner.")
    cycle_delay = Float(0.01, config=True,
                        help="Seconds to wait after a change before a cycle, so bursts share one cycle.")
    cycle_min_interval = Float(0.05, config=True,
                               help="Least seconds between the starts of two scheduling cycles. Under a "
                                    "burst of changes cycles come at most this often, each taking all that "
                                    "arrived (throughput); a change after a quiet spell waits only "
                                    "cycle_delay (latency).")
    cycle_max_busy = Float(0.1, config=True,
                           help="Largest share of the service's time (0-1) that scheduling cycles may take "
                                "under a burst of changes: after a cycle of S seconds the next starts no "
                                "sooner than S / cycle_max_busy after it began (and no sooner than "
                                "cycle_min_interval, no later than cycle_interval). Cycles walk all pending "
                                "work, so with a long backlog this keeps the API answering; a lone change "
                                "after a quiet spell is not delayed by it.")

    def next_cycle_gap(self) -> float:
        """Seconds until a cycle may start under a burst (<= 0: now)."""
        spacing = max(self.cycle_min_interval,
                      min(self._last_cycle_seconds / self.cycle_max_busy, self.cycle_interval))
        return self._last_cycle + spacing - time.monotonic()

    def run_cycle(self) -> None:
        self._last_cycle = time.monotonic()
        try:
            self._run_cycle()
        finally:
            self._last_cycle_seconds = time.monotonic() - self._last_cycle

    def _run_cycle(self) -> None:
        now = self._last_cycle_at = time.time()
        self.apply_deadlines(now)
        res = self.sched.cycle(now=now)
        self.cycles += 1
        self.metrics.observe_cycle(res)
        pending = self.sched.state.pending
        order = [i for i in res.order if i in pending]
        per_queue: dict[str, int] = {}
        positions = {}
        for n, wid in enumerate(order, 1):
            q = pending[wid].queue
            per_queue[q] = per_queue.get(q, 0) + 1
            positions[wid] = (n, per_queue[q])
        self.positions, self.line_lengths, self.line_order = positions, (len(order), per_queue), order
        self.next_begin = self.sched.next_begin()
        self.estimates.new_cycle()
        self.audit.emit_new(self.sched.store)
        self._notify()

    def next_cycle_in(self) -> float:
        """Seconds until the next periodic cycle: ``cycle_interval``, or sooner when held work's begin
        time comes first (it joins the line on time)."""
        if self.next_begin is None or self.next_begin <= self._last_cycle_at:
            return self.cycle_interval      # (one a cycle did not release: no cycles back to back for it)
        return min(self.cycle_interval, max(0.0, self.next_begin - time.time()))

    async def scheduling_loop(self) -> None:
        while not self.stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), self.next_cycle_in())
                await asyncio.sleep(self.cycle_delay)
                gap = self.next_cycle_gap()
                if gap > 0:
                    await asyncio.sleep(gap)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if self.stopping:
                break
            try:
                self.run_cycle()
            except LostExclusivity as e:
                # Another service has the database now: whatever this one decided would clash.
                self.metrics.cycle_failed("lost_exclusivity")
                self.log.critical("%s: it stops scheduling and exits", e)
                self.exit_status = 1
                self._stop.set()
                break
            except StoreUnavailable as e:
                # One line when it starts, not a traceback a cycle: memory is as it was (or is
                # rebuilt once the database can be read), and each cycle tries again.
                self.metrics.cycle_failed("database_unavailable")
                if not self._db_down:
                    self.log.warning("scheduling paused: the database is unavailable (%s); trying again "
                                     "every cycle", e.detail)
                self._db_down = True
            except Exception:
                self.metrics.cycle_failed("error")
                self.log.exception("scheduling cycle failed; memory follows the database (rebuilt from it "
                                   "now, or as soon as it can be read)")
            else:
                if self._db_down:
                    self.log.warning("the database answers again; scheduling resumed")
                self._db_down = False
