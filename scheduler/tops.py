"""A user's own order (Slurm's ``scontrol top``): which of their waiting jobs goes first.

``top`` puts a waiting workload first among its owner's own waiting work of the same queue and
priority class: those jobs swap places in line, so that it takes the best place any of them
had. Other users' work keeps every place it had: no one gets ahead of anyone else this way.
The latest put first goes first (``metadata.top``: when); it stays so while it waits, and
again if it is requeued. Only the service's own order ('priority') honours it.
"""

from __future__ import annotations

from .errors import Conflict
from .model import AWAITING_APPROVAL, HELD, PENDING, TOP, Workload


class Tops:
    """Needs ``get``, ``state``, ``store``, ``_now``, ``_tx`` and ``_event`` of the ``Scheduler``. (A job
    array's waiting tasks, in index order: ``act_on_array(..., "top")``.)"""

    def top(self, workload_id: str, now=None, actor: str = "") -> Workload:
        """Put ``workload_id`` first among its owner's waiting work of its queue and class."""
        w = self.get(workload_id)
        if w.state not in (PENDING, HELD, AWAITING_APPROVAL):
            raise Conflict(f"workload {workload_id} is {w.state.replace('_', ' ')}; only waiting work can go "
                           "first among its owner's")
        now = self._now(now)
        with self._tx():
            w.metadata = {**w.metadata, TOP: now}
            self.store.put_workload(w)
            self._event(now, "topped", w, "", actor=actor)
        if w.id in self.state.pending:
            self.state.pending[w.id] = w        # counted among the topped (state.PendingWork)
        return w


def own_first(ordered: list[Workload], tops: list[Workload]) -> list[Workload]:
    """``ordered`` with each of ``tops`` (topped workloads among them) moved first among its owner's
    work of its queue and class (latest topped first), into the places that work had; every other
    place unchanged."""
    topped = {w.id for w in tops}
    users = {w.user for w in tops}
    places: dict[tuple, list[int]] = {(w.queue, w.user, w.priority): [] for w in tops}
    for i, w in enumerate(ordered):
        if w.user in users:         # (a set of names: cheaper than a key for every workload)
            at = places.get((w.queue, w.user, w.priority))
            if at is not None:
                at.append(i)
    out = list(ordered)
    for at in places.values():
        members = [ordered[i] for i in at]
        first = sorted((w for w in members if w.id in topped), key=lambda w: -w.metadata[TOP])
        for i, w in zip(at, first + [w for w in members if w.id not in topped]):
            out[i] = w
    return out
