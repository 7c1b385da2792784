"""Cancelling a workload, and work that is still being stopped when it is cancelled.

Work that a launcher runs (it has ``metadata.job``) and holds GPUs is not over when it is
cancelled: its processes (or its pod) get the launcher's grace period after SIGTERM, and a
new job placed on its GPUs meanwhile would find them in use (on Kubernetes the kubelet
refuses a pod bound to a node whose GPUs a terminating pod still holds). So it goes to
``cancelling``: it keeps its GPUs, a cycle treats them as about to be free (as a preempted
victim's: what lands there starts once it has stopped), and it ends ``cancelled`` when its
launcher reports it stopped — or exited on its own. Slurm's COMPLETING state does the same.
Everything else (pending work, notebooks, which their spawner stops before it reports, work
run by a runner of one's own that polls for its state) ends at once. Work that nobody reports
stopped is bounded by the service's stop deadline (stop_deadline.py).
"""

from __future__ import annotations

from .errors import Conflict
from .model import (ADMITTED, AWAITING_APPROVAL, CANCEL_REASON, CANCELLED, CANCELLING, PENDING, PREEMPTING, RUNNING,
                    STOPPING_SINCE, TERMINAL, Workload, leaving)


def run_by_launcher(w: Workload) -> bool:
    """Whether a launcher runs ``w``: it says what to run (``metadata.job``) and is no notebook."""
    return w.kind != "notebook" and isinstance(w.metadata.get("job"), dict)


class Cancels:
    """Needs ``get``, ``state``, ``store``, ``_now``, ``_tx``, ``_event`` and ``_end_holding``
    of the ``Scheduler``."""

    def cancel(self, workload_id: str, now=None, reason: str = "cancelled by user") -> Workload:
        """Cancel ``workload_id``: it ends at once, or, if a launcher runs it and it holds
        GPUs, goes to ``cancelling`` until the launcher reports it stopped."""
        w = self.get(workload_id)
        if w.state in TERMINAL:
            raise Conflict(f"workload {workload_id} already ended ({w.state})")
        if w.state == CANCELLING:
            return w                     # asked twice: it is being stopped already
        now = self._now(now)
        with self._tx():
            if w.state in (PENDING, AWAITING_APPROVAL):
                self.state.pending.pop(w.id, None)
                w.state, w.ended_at, w.reason = CANCELLED, now, reason
                self.store.put_workload(w)
                self._event(now, "cancelled", w, reason)
            elif w.state in (ADMITTED, RUNNING, PREEMPTING) and run_by_launcher(w):
                was_leaving = leaving(w)
                extra = {} if w.state == PREEMPTING else {STOPPING_SINCE: now}
                w.metadata = {**w.metadata, CANCEL_REASON: reason, **extra}
                w.state = CANCELLING
                w.reason = f"{reason}; its GPUs return once its launcher has stopped it"
                if not was_leaving and leaving(w):
                    self.state.tree.mark_leaving(w.queue, w.total, 1)
                self.store.put_workload(w)
                self._event(now, "cancelling", w, f"{reason}; its GPUs return once its launcher has stopped it")
                return w
            else:
                self._end_holding(w, now, "cancelled", reason, state=CANCELLED)
        self.state.forget(w)
        return w

    def _end_cancel(self, w: Workload, now: float, how: str) -> Workload:
        """Cancelled work that was being stopped has stopped (``how``): it ends cancelled."""
        reason = f"{w.metadata.get(CANCEL_REASON) or 'cancelled'}; {how}"
        with self._tx():
            self._end_holding(w, now, "cancelled", reason, state=CANCELLED)
        self.state.forget(w)
        return w
