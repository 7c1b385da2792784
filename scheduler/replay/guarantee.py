"""Did any team wait for capacity it is guaranteed? Watched after every replay cycle.

A pending job is *owed* while its team's queue holds less than its guarantee
by at least the job's GPUs, and *reclaimable* while, moreover, other queues
together borrow at least that many GPUs beyond their own guarantees: then the
scheduler owes it a start, by reclaiming borrowed GPUs if need be. It may still
wait, legitimately, until borrowers have run their class's ``preempt_after``
(10 minutes for training). ``GuaranteeWatch`` records for every job the longest
stretch it stayed reclaimable and pending; longer than the grace (the largest
``preempt_after`` plus ``slack`` seconds) is a violation. Waits while owed but
with nothing borrowed (the free GPUs are scattered over nodes: fragmentation)
are reported apart, as ``owed_max_wait_s``.

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
        self.since: dict[str, float] = {}  # workload id -> reclaimable since
        self.owed: dict[str, float] = {}   # workload id -> owed since
        self.max_wait = 0.0
        self.owed_max = 0.0
        self.violations: list[tuple[str, float]] = []   # (workload id, seconds entitled and waiting)
        self.grace: float | None = None
        self.checked = 0

    def __call__(self, sched, now, res, workload_to_job):
        st = sched.state
        if self.grace is None:
            self.grace = max((c.preempt_after for c in st.classes.values()), default=0.0) + self.slack
        tree = st.tree
        room, over = {}, {}
        for q, g in tree.guaranteed.items():
            if tree.specs[q].parent is None or not tree.is_leaf(q):
                continue         # the root holds the whole cluster; teams are what is promised
            free = g.get(GPU, 0) - tree.usage[q].get(GPU, 0)
            if free > 0:
                room[q] = free
            elif free < 0:
                over[q] = -free
        borrowed = sum(over.values())
        owed, reclaimable = set(), set()
        if room and st.pending:
            for w in st.pending.values():
                free = room.get(w.queue)
                need = w.request.get(GPU, 0) * w.workers
                if free is not None and need <= free:
                    owed.add(w.id)
                    self.owed.setdefault(w.id, now)
                    if borrowed >= need:
                        reclaimable.add(w.id)
                        self.since.setdefault(w.id, now)
            self.checked += 1
        for wid in [i for i in self.since if i not in reclaimable]:
            self._done(wid, now)
        for wid in [i for i in self.owed if i not in owed]:
            self.owed_max = max(self.owed_max, now - self.owed.pop(wid))
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
        for wid in list(self.owed):
            self.owed_max = max(self.owed_max, now - self.owed.pop(wid))
        return {"guarantee_grace_s": self.grace or 0.0, "guarantee_max_wait_s": self.max_wait,
                "guarantee_violations": len(self.violations), "owed_max_wait_s": self.owed_max}
