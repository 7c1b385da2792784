"""Did any team wait for capacity it is guaranteed? Watched after every replay cycle.

A pending job is *entitled* while its team's queue holds less than its
guarantee by at least the job's GPUs: the scheduler owes it a start, by
reclaiming borrowed GPUs if need be. It may still wait, legitimately, until
borrowers have run their class's ``preempt_after`` (10 minutes for training),
a gang until whole nodes can be cleared. ``GuaranteeWatch`` records, for every
job, how long it stayed entitled and pending; a wait longer than the allowed
grace (the largest ``preempt_after`` plus ``slack`` seconds) is a violation.

Only queues with a GPU guarantee are watched (one-queue policies have none
worth the name: the single queue is guaranteed the whole cluster).
"""

from __future__ import annotations

from ..resources import GPU


class GuaranteeWatch:
    """An ``after_cycle`` hook for ``replay.run``; read ``max_wait``/``violations`` after."""

    def __init__(self, slack: float = 60.0, then=None):
        self.slack = slack
        self.then = then                   # another after_cycle hook to call
        self.since: dict[str, float] = {}  # workload id -> entitled since
        self.max_wait = 0.0
        self.violations: list[tuple[str, float]] = []   # (workload id, seconds entitled and waiting)
        self.grace: float | None = None
        self.checked = 0

    def __call__(self, sched, now, res, workload_to_job):
        st = sched.state
        if self.grace is None:
            self.grace = max((c.preempt_after for c in st.classes.values()), default=0.0) + self.slack
        tree = st.tree
        room = {}
        for q, g in tree.guaranteed.items():
            if tree.specs[q].parent is None:
                continue         # the root holds the whole cluster; teams are what is promised
            free = g.get(GPU, 0) - tree.usage[q].get(GPU, 0)
            if free > 0:
                room[q] = free
        entitled = set()
        if room and st.pending:
            for w in st.pending.values():
                free = room.get(w.queue)
                if free is not None and w.request.get(GPU, 0) * w.workers <= free:
                    entitled.add(w.id)
                    self.since.setdefault(w.id, now)
            self.checked += 1
        for wid in [i for i in self.since if i not in entitled]:
            self._done(wid, now)
        if self.then is not None:
            self.then(sched, now, res, workload_to_job)

    def _done(self, wid: str, now: float) -> None:
        waited = now - self.since.pop(wid)
        self.max_wait = max(self.max_wait, waited)
        if waited > self.grace:
            self.violations.append((wid, waited))

    def finish(self, now: float) -> dict:
        for wid in list(self.since):
            self._done(wid, now)
        return {"guarantee_grace_s": self.grace or 0.0, "guarantee_max_wait_s": self.max_wait,
                "guarantee_violations": len(self.violations)}
