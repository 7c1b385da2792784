"""Work ended while it still runs — cancelled, or reclaimed for idleness — keeps its GPUs until
it has stopped.

Work that a launcher runs (it has ``metadata.job``) and holds GPUs is not over when it is
cancelled: its processes (or its pod) get the launcher's grace period after SIGTERM, and a
new job placed on its GPUs meanwhile would find them in use (on Kubernetes the kubelet
refuses a pod bound to a node whose GPUs a terminating pod still holds). So it goes to
``cancelling``; an idle notebook whose GPUs are taken back goes to ``reclaiming`` while the
notebook watch has the hub stop its server. Either keeps its GPUs, a cycle treats them as
about to be free (as a preempted victim's: what lands there starts once it has stopped), and
it ends ``cancelled`` / ``reclaimed`` when its launcher reports it stopped, or its spawner
that it ended. Slurm's COMPLETING state is the same idea. Everything else (pending work,
notebooks, which their spawner stops before it reports, work run by a runner of one's own
that polls for its state) ends at once when cancelled. Work that nobody reports stopped is
bounded by the service's stop deadline (stop_deadline.py).
"""

from __future__ import annotations

from .errors import Conflict
from .model import (ADMITTED, AWAITING_APPROVAL, CANCELLED, CANCELLING, ENDS_AS, HELD, PENDING, PREEMPTING, RECLAIMING,
                    RUNNING, STOP_REASON, STOPPING_SINCE, TERMINAL, Workload, leaving)


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
        if w.state in (CANCELLING, RECLAIMING):
            return w                     # it is being stopped already, and ends once it has
        now = self._now(now)
        with self._tx():
            if w.state in (PENDING, AWAITING_APPROVAL, HELD):
                self.state.pending.pop(w.id, None)
                self.state.held.pop(w.id, None)
                w.state, w.ended_at, w.reason = CANCELLED, now, reason
                self.store.put_workload(w)
                self._event(now, "cancelled", w, reason)
            elif w.state in (ADMITTED, RUNNING, PREEMPTING) and run_by_launcher(w):
                self._begin_stop(w, now, CANCELLING, reason,
                                 f"{reason}; its GPUs return once its launcher has stopped it")
                return w
            else:
                self._end_holding(w, now, "cancelled", reason, state=CANCELLED)
        self.state.forget(w)
        return w

    def _begin_stop(self, w: Workload, now: float, state: str, reason: str, note: str) -> None:
        """``w`` (holding) is to stop for good, as ``state`` (cancelling / reclaiming): it keeps
        what it holds, which a cycle counts as leaving. Call inside a transaction."""
        was_leaving = leaving(w)
        extra = {} if w.state == PREEMPTING else {STOPPING_SINCE: now}    # a victim counts from then
        w.metadata = {**w.metadata, STOP_REASON: reason, **extra}
        w.state, w.reason = state, note
        if not was_leaving and leaving(w):
            self.state.tree.mark_leaving(w.queue, w.total, 1)
        self.store.put_workload(w)
        self._event(now, state, w, note)

    def _end_stopping(self, w: Workload, now: float, how: str) -> Workload:
        """Work told to stop for good (cancelling, reclaiming) has stopped (``how``): it ends
        cancelled / reclaimed."""
        end = ENDS_AS[w.state]
        reason = f"{w.metadata.get(STOP_REASON) or end}; {how}"
        with self._tx():
            self._end_holding(w, now, end, reason, state=end)
        self.state.forget(w)
        return w
