"""The reads of ``SqlStore`` (``sql.py``): each in the caller's transaction, or in a short
read-only one. Lists of workloads page in the query itself, so that a long history is
never read whole."""

from __future__ import annotations

from sqlalchemy import false, func, or_, select

from ..model import TERMINAL, Allocation, Event, NodeSpec, PriorityClass, QueueSpec, Workload
from . import tables as T
from .base import PURGED_SEQ, Snapshot


class SqlReads:
    """Mixed into ``SqlStore``, which provides ``_r()`` (a connection to read with)."""

    def get_meta(self, key: str) -> str | None:
        with self._r() as conn:
            return conn.execute(select(T.meta.c.value).where(T.meta.c.key == key)).scalar()

    def load(self) -> Snapshot:
        wl = T.workloads
        with self._r(consistent=True) as conn:
            def specs(table):
                return [r[0] for r in conn.execute(select(table.c.spec).order_by(table.c.name))]

            queues = [QueueSpec.from_dict(d) for d in specs(T.queues)]
            classes = [PriorityClass.from_dict(d) for d in specs(T.priority_classes)]
            nodes = [NodeSpec.from_dict(d) for d in specs(T.nodes)]
            live = [Workload.from_dict(r[0]) for r in conn.execute(
                select(wl.c.data).where(wl.c.state.not_in(TERMINAL)).order_by(wl.c.seq))]
            max_seq = max(conn.execute(select(func.max(wl.c.seq))).scalar() or 0, int(conn.execute(
                select(T.meta.c.value).where(T.meta.c.key == PURGED_SEQ)).scalar() or 0))
            fs = conn.execute(select(T.fairshare.c.time, T.fairshare.c.usage)
                              .where(T.fairshare.c.id == 1)).first()
        return Snapshot(
            queues=queues, classes=classes, nodes=nodes, workloads=live,
            fairshare_time=fs[0] if fs else None, fairshare=dict(fs[1]) if fs else {},
            next_seq=(max_seq or 0) + 1)

    def get_workload(self, workload_id: str) -> Workload | None:
        with self._r() as conn:
            d = conn.execute(select(T.workloads.c.data).where(T.workloads.c.id == workload_id)).scalar()
        return Workload.from_dict(d) if d is not None else None

    def _workload_filter(self, q, user, queue, states, kinds, seen_by, array=None):
        wl = T.workloads
        if array is not None:
            q = q.where(wl.c.array_id == array)
        if user is not None:
            q = q.where(wl.c.user == user)
        if queue is not None:
            q = q.where(wl.c.queue == queue)
        if states is not None:
            q = q.where(wl.c.state.in_(tuple(states)))
        if kinds is not None:
            q = q.where(wl.c.kind.in_(tuple(kinds)))
        if seen_by is not None:
            owner, queues = seen_by
            # Only the terms that can match: "queue IN ()" beside the owner keeps indexes unused.
            terms = ([wl.c.user == owner] if owner is not None else []) + (
                [wl.c.queue.in_(tuple(queues))] if queues else [])
            q = q.where(or_(*terms) if len(terms) > 1 else terms[0] if terms else false())
        return q

    def get_workloads(self, *, user=None, queue=None, states=None, limit=None, kinds=None, seen_by=None,
                      newest_first=False, offset=0, array=None) -> list[Workload]:
        wl = T.workloads
        q = self._workload_filter(select(wl.c.data), user, queue, states, kinds, seen_by, array).order_by(
            wl.c.seq.desc() if newest_first else wl.c.seq)
        if limit:
            q = q.limit(limit)
        if offset:
            q = q.offset(offset)
        with self._r() as conn:
            return [Workload.from_dict(r[0]) for r in conn.execute(q)]

    def count_workloads(self, *, user=None, queue=None, states=None, kinds=None, seen_by=None, array=None) -> int:
        q = self._workload_filter(select(func.count()).select_from(T.workloads), user, queue, states, kinds,
                                  seen_by, array)
        with self._r() as conn:
            return conn.execute(q).scalar()

    def get_events(self, *, workload_id=None, since=None, until=None, kinds=None,
                   limit=None, after_id=None, newest_first=False) -> list[Event]:
        ev = T.events
        q = select(ev.c.id, ev.c.time, ev.c.kind, ev.c.workload_id, ev.c.reason, ev.c.data
                   ).order_by(ev.c.id.desc() if newest_first else ev.c.id)
        if after_id is not None:
            q = q.where(ev.c.id > after_id)
        if workload_id is not None:
            q = q.where(ev.c.workload_id == workload_id)
        if since is not None:
            q = q.where(ev.c.time >= since)
        if until is not None:
            q = q.where(ev.c.time < until)
        if kinds is not None:
            q = q.where(ev.c.kind.in_(tuple(kinds)))
        if limit:
            q = q.limit(limit)
        with self._r() as conn:
            return [Event(time=r.time, kind=r.kind, workload_id=r.workload_id, reason=r.reason,
                          data=r.data, id=r.id) for r in conn.execute(q)]

    def last_event_id(self) -> int:
        with self._r() as conn:
            return conn.execute(select(func.max(T.events.c.id))).scalar() or 0

    def get_allocations(self, start=None, end=None) -> list[Allocation]:
        """Ledger intervals that overlap [start, end), in the order they were opened."""
        al = T.allocations
        q = select(al.c.workload_id, al.c.user, al.c.queue, al.c.flavor, al.c.gpus,
                   al.c.start, al.c.end, al.c.array_id).order_by(al.c.id)
        if end is not None:
            q = q.where(al.c.start < end)
        if start is not None:
            q = q.where(al.c.end.is_(None) | (al.c.end > start))
        with self._r() as conn:
            return [Allocation(*r) for r in conn.execute(q)]
