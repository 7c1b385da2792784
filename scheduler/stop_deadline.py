"""Work told to stop that no one reports stopped (``ComputeHubService.stop_deadline``).

Work preempted, cancelled while a launcher runs it, or reclaimed (cancels.py), keeps its GPUs
until it is reported stopped, and a cycle treats what it holds as about to be free: the
preemptor is placed there and waits ("waiting for them to stop"). A launcher that is down,
or a pod stuck terminating on a node that stopped answering, never reports it, and that work
would wait on those GPUs for good while GPUs elsewhere go to others. Past the deadline the
stopping work is *overdue*: what it holds counts as held for as long as nobody knows whether
it still runs (so a GPU is never used twice), not as leaving, so the work that waited for it
is placed, or makes room, elsewhere. Slurm does the same with a step it cannot kill
(``UnkillableStepTimeout``), draining the node. An event says so once, and the service's
metrics count it for an alert. A launcher's report that it has stopped then ends it as any
stop does. Trace replay releases victims at once and has no use for it.
"""

from __future__ import annotations

from .model import CANCELLING, RECLAIMING, STOP_OVERDUE, STOPPING, STOPPING_SINCE, Workload


def _words(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


class StopDeadline:
    """Needs ``state``, ``store``, ``_now``, ``_tx`` and ``_event`` of the ``Scheduler``."""

    def flag_unstopped(self, deadline: float, now=None) -> list[Workload]:
        """Work told to stop (preempted or cancelled) ``deadline`` seconds ago (0: never) and not reported
        stopped becomes overdue, in one transaction; returns the work newly overdue. Work
        stopping since before this service recorded when (an older version) counts from now."""
        if not deadline:
            return []
        now = self._now(now)
        stopping = [w for w in self.state.holding.values() if w.state in STOPPING and STOP_OVERDUE not in w.metadata]
        unknown = [w for w in stopping if STOPPING_SINCE not in w.metadata]
        late = [w for w in stopping if now - float(w.metadata.get(STOPPING_SINCE, now)) >= deadline]
        if not unknown and not late:
            return []
        with self._tx():
            for w in unknown:
                w.metadata = {**w.metadata, STOPPING_SINCE: now}
                self.store.put_workload(w)
            for w in late:
                self.state.tree.mark_leaving(w.queue, w.total, -1)    # no longer about to be free
                w.metadata = {**w.metadata, STOP_OVERDUE: now}
                self.store.put_workload(w)
                nodes = sorted({a.node for a in w.placement})
                why = ("cancelled" if w.state == CANCELLING else "reclaimed: idle" if w.state == RECLAIMING
                       else f"preempted by {w.metadata.get('preempted_by') or 'other work'}")
                self._event(now, "stop_overdue", w,
                            f"told to stop {_words(now - float(w.metadata[STOPPING_SINCE]))} ago ({why}) "
                            f"and no launcher has reported it stopped: its {w.gpus} GPU(s) on "
                            f"{', '.join(nodes) or 'no node'} stay held, and nothing else is placed on them, "
                            f"until one does; what waited for them goes elsewhere",
                            nodes=nodes)
        return late
