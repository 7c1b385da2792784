"""Admitted work that nothing starts gives its GPUs back (``ComputeHubService.start_deadline``).

A launcher reports a job running as soon as it has started it, and a launcher that restarts
adopts what it had started. Admitted work that no one reports running for an hour is work
nothing will run: a submission without ``metadata.job`` (``computehub submit``, a bare
``POST workloads``) that no runner of its own picks up, a kind no launcher serves, or a
launcher that is down. Holding its GPUs for good would be the idle GPU this project exists to
end, so it goes back in line once where its class requeues (a launcher back by then starts
it), and fails the next time with the reason said. Notebooks are left to their spawner, which
bounds its own start. The service applies it before each cycle; trace replay reports work
running at once and has no use for it.
"""

from __future__ import annotations

from .model import ADMITTED, FAILED, START_TIMEOUTS, Workload


def overdue(holding: dict[str, Workload], now: float, deadline: float) -> list[Workload]:
    """Admitted (not notebook) work holding its resources ``deadline`` seconds or more."""
    if not deadline:
        return []
    return [w for w in holding.values()
            if w.state == ADMITTED and w.kind != "notebook" and w.admitted_at is not None
            and now - w.admitted_at >= deadline]


class StartDeadline:
    """Needs ``state``, ``_now``, ``_tx`` and ``_end_holding`` of the ``Scheduler``."""

    def give_back_unstarted(self, deadline: float, now=None) -> list[Workload]:
        """Admitted work not reported running within ``deadline`` seconds (0: never) gives its
        resources back, in one transaction: requeued the first time where its class requeues,
        failed otherwise. Returns the work given back."""
        now = self._now(now)
        late = overdue(self.state.holding, now, deadline)
        if not late:
            return []
        with self._tx():
            for w in late:
                tries = int(w.metadata.get(START_TIMEOUTS, 0)) + 1
                w.metadata = {**w.metadata, START_TIMEOUTS: tries}
                why = (f"admitted {deadline / 60:g} min ago and nothing reported it running: no launcher "
                       f"for {w.kind} work is running, or it has no metadata.job for one to run")
                cls = self.state.classes.get(w.priority)
                if tries == 1 and cls is not None and cls.requeue:
                    self._end_holding(w, now, "start_timeout", f"{why}; back in line once", state=FAILED,
                                      requeue=True)
                else:
                    self._end_holding(w, now, "start_timeout",
                                      why + (" (the second time)" if tries > 1 else ""), state=FAILED)
        for w in late:
            if w.state == FAILED:
                self.state.forget(w)
        return late
