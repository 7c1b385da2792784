"""Deadlines the service applies before each scheduling cycle, for work whose launcher does not
answer: admitted work nothing reports running gives its GPUs back (``start_deadline``,
scheduler/start_deadline.py), and work told to stop (preempted, cancelled, reclaimed) that
nothing reports stopped stops holding up the work that waits for it (``stop_deadline``,
scheduler/stop_deadline.py). Mixed into ``ComputeHubService``."""

from __future__ import annotations

from traitlets import Float, HasTraits, validate

from scheduler.config_checks import check_number


class Deadlines(HasTraits):
    """Needs ``sched`` and ``log``."""

    start_deadline = Float(3600.0, config=True,
                           help="Seconds admitted training, batch and inference work may hold its GPUs "
                                "before whatever runs it (a launcher) reports it running. Past it the "
                                "GPUs go back and it is requeued where its class requeues (a launcher "
                                "that was down starts it when back); the next time it fails, saying "
                                "nothing started it (no launcher for its kind, or no metadata.job for "
                                "one to run). Notebooks are left to their spawner's start timeout. "
                                "0 = hold them for as long as it takes.")
    stop_deadline = Float(900.0, config=True,
                          help="Seconds work told to stop (preempted, cancelled while a launcher runs "
                               "it, or reclaimed for idleness) may take to stop, its launcher's grace "
                               "period and last checkpoint included, before the service stops counting "
                               "on it: until then the work that waits for its GPUs waits; past "
                               "it they count as held, not about to be free, so nothing is placed "
                               "on them and the waiting work is placed or makes room elsewhere. "
                               "An event (stop_overdue) and computehub_stop_overdue_workloads say "
                               "so; a launcher's report that it stopped frees them. For a launcher "
                               "that is down or a pod stuck terminating on a lost node. 0 = wait "
                               "for the victim for as long as it takes.")

    @validate("start_deadline", "stop_deadline")
    def _deadline_ok(self, proposal):
        return check_number(f"ComputeHubService.{proposal.trait.name}", proposal.value, low=0, unit="seconds")

    def apply_deadlines(self, now: float) -> None:
        for w in self.sched.give_back_unstarted(self.start_deadline, now=now):
            self.log.warning("%s (%s, %s): not reported running within %.0f s of its admission: %s", w.id,
                             w.user, w.kind, self.start_deadline, "requeued" if w.state == "pending" else "failed")
        for w in self.sched.flag_unstopped(self.stop_deadline, now=now):
            self.log.warning("%s (%s, %s): told to stop %.0f s ago and not reported stopped; its GPUs stay "
                             "held, and what waited for them goes elsewhere", w.id, w.user, w.kind,
                             self.stop_deadline)
