"""What the scheduler needs from durable state, and an in-memory store.

The scheduler writes through a ``Store`` inside ``transaction()`` blocks: the
decisions of one cycle, one submission, one admin change each land atomically
or not at all. On start it rebuilds itself from ``load()``.

``MemoryStore`` keeps everything in lists; trace replay and unit tests use it.
``SqlStore`` (``store.sql``) is the durable one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from ..model import TERMINAL, Allocation, Event, NodeSpec, PriorityClass, QueueSpec, Workload

PURGED_SEQ = "purged_seq"     # meta key: the highest workload seq purge_history deleted


@dataclass
class Snapshot:
    """Everything needed to rebuild the scheduler after a restart."""

    queues: list[QueueSpec] = field(default_factory=list)
    classes: list[PriorityClass] = field(default_factory=list)
    nodes: list[NodeSpec] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)   # not yet terminal
    fairshare_time: float | None = None
    fairshare: dict[str, dict[str, float]] = field(default_factory=dict)
    next_seq: int = 1


class Store:
    """Interface of durable state. Every write happens inside ``transaction()``."""

    def transaction(self):
        raise NotImplementedError

    def unbounded(self):
        """Calls this thread makes inside are not broken off after a timeout (``SqlStore``)."""
        return contextlib.nullcontext()

    def load(self) -> Snapshot:
        raise NotImplementedError

    def put_queue(self, spec: QueueSpec) -> None:
        raise NotImplementedError

    def delete_queue(self, name: str) -> None:
        raise NotImplementedError

    def put_class(self, pc: PriorityClass) -> None:
        raise NotImplementedError

    def delete_class(self, name: str) -> None:
        raise NotImplementedError

    def put_node(self, spec: NodeSpec) -> None:
        raise NotImplementedError

    def delete_node(self, name: str) -> None:
        raise NotImplementedError

    def put_workload(self, w: Workload) -> None:
        """Insert or update a workload, keeping its GPU assignments in step
        (a durable store refuses a GPU held by two workloads)."""
        raise NotImplementedError

    def put_workloads(self, ws: list[Workload]) -> None:
        """``put_workload`` for several workloads as one change of GPU assignments: a GPU that
        passes from one of them to another (a victim's to the work that takes it, or one
        moved workload's to another) is never seen held twice. A workload given twice is
        written once, as last given."""
        for w in {w.id: w for w in ws}.values():
            self.put_workload(w)

    def add_new_workloads(self, ws: list[Workload]) -> None:
        """Insert workloads just submitted (pending, holding nothing) in one go; an id
        already stored is refused, never overwritten."""
        for w in ws:
            self.put_workload(w)

    def add_event(self, event: Event) -> None:
        raise NotImplementedError

    def add_events(self, events: list[Event]) -> None:
        """Several events in one go; their ids are not filled in."""
        for e in events:
            self.add_event(e)

    def open_allocation(self, a: Allocation) -> None:
        raise NotImplementedError

    def close_allocation(self, workload_id: str, end: float) -> None:
        raise NotImplementedError

    def put_fairshare(self, time: float, usage: dict[str, dict[str, float]]) -> None:
        raise NotImplementedError

    def get_workload(self, workload_id: str) -> Workload | None:
        raise NotImplementedError

    def get_workloads(self, *, user: str | None = None, queue: str | None = None,
                      states: tuple[str, ...] | None = None, limit: int | None = None,
                      kinds: tuple[str, ...] | None = None, seen_by: tuple[str | None, tuple[str, ...]] | None = None,
                      newest_first: bool = False, offset: int = 0, array: str | None = None) -> list[Workload]:
        """Stored workloads (ended ones too) in submission order, or newest first; ``seen_by``
        = (a user, queues): only the user's own work and the work in those queues; ``array``:
        only the tasks of that job array. ``offset`` and ``limit`` page through the result, so a
        year of history is never read whole."""
        raise NotImplementedError

    def count_workloads(self, *, user: str | None = None, queue: str | None = None,
                        states: tuple[str, ...] | None = None, kinds: tuple[str, ...] | None = None,
                        seen_by: tuple[str | None, tuple[str, ...]] | None = None, array: str | None = None) -> int:
        """How many ``get_workloads`` would return without ``limit`` and ``offset``."""
        raise NotImplementedError

    def get_events(self, *, workload_id: str | None = None, since: float | None = None,
                   until: float | None = None, kinds: tuple[str, ...] | None = None,
                   limit: int | None = None, after_id: int | None = None,
                   newest_first: bool = False) -> list[Event]:
        """Events in id order (newest first if asked; ``limit`` then keeps the newest);
        ``after_id`` returns only those recorded after that one."""
        raise NotImplementedError

    def last_event_id(self) -> int:
        """The id of the newest event (0 if none)."""
        raise NotImplementedError

    def get_allocations(self, start: float | None = None, end: float | None = None) -> list[Allocation]:
        """Ledger intervals that overlap [start, end)."""
        raise NotImplementedError

    def purge_history(self, *, workloads_before: float | None = None, events_before: float | None = None,
                      allocations_before: float | None = None, batch: int = 2000) -> dict[str, int]:
        """Delete history older than the given times (epoch seconds; None keeps that kind):
        ended workloads that ended before ``workloads_before``, events recorded before
        ``events_before``, ledger intervals that closed before ``allocations_before``. Live
        work and open intervals are never touched. Each batch of at most ``batch`` rows is its
        own transaction; the highest seq purged is remembered, so no id is handed out again.
        Returns how many rows of each kind went."""
        raise NotImplementedError

    def refresh_statistics(self) -> None:
        """Bring the database's query planner statistics up to date (where it has them)."""

    def close(self) -> None:
        pass


class MemoryStore(Store):
    """State in process memory: for trace replay, ETAs and unit tests.

    ``keep_events=False`` drops events (a replay of 15k jobs does not need them).
    """

    def __init__(self, keep_events: bool = True):
        self.keep_events = keep_events
        self.queues: dict[str, QueueSpec] = {}
        self.classes: dict[str, PriorityClass] = {}
        self.nodes: dict[str, NodeSpec] = {}
        self.workloads: dict[str, Workload] = {}
        self.events: list[Event] = []
        self.last_id = 0          # of events: ids are never handed out twice
        self.purged_seq = 0       # the highest seq purge_history took
        self.allocations: list[Allocation] = []
        self._open: dict[str, Allocation] = {}
        self.fairshare_time: float | None = None
        self.fairshare: dict[str, dict[str, float]] = {}

    @contextlib.contextmanager
    def transaction(self):
        yield self

    def load(self) -> Snapshot:
        live = [Workload.from_dict(w.to_dict()) for w in self.workloads.values()
                if w.state not in TERMINAL]
        return Snapshot(
            queues=list(self.queues.values()), classes=list(self.classes.values()),
            nodes=list(self.nodes.values()), workloads=live,
            fairshare_time=self.fairshare_time, fairshare=dict(self.fairshare),
            next_seq=max([self.purged_seq, *(w.seq for w in self.workloads.values())]) + 1)

    def put_queue(self, spec):
        self.queues[spec.name] = spec

    def delete_queue(self, name):
        self.queues.pop(name, None)

    def put_class(self, pc):
        self.classes[pc.name] = pc

    def delete_class(self, name):
        self.classes.pop(name, None)

    def put_node(self, spec):
        self.nodes[spec.name] = spec

    def delete_node(self, name):
        self.nodes.pop(name, None)

    def put_workload(self, w):
        self.workloads[w.id] = w

    def add_new_workloads(self, ws):
        taken = [w.id for w in ws if w.id in self.workloads]
        if taken:
            raise ValueError(f"workload id(s) already stored: {', '.join(taken)}")
        for w in ws:
            self.workloads[w.id] = w

    def add_event(self, event):
        if self.keep_events:
            self.last_id += 1
            event.id = self.last_id
            self.events.append(event)

    def open_allocation(self, a):
        self._open[a.workload_id] = a
        self.allocations.append(a)

    def close_allocation(self, workload_id, end):
        a = self._open.pop(workload_id, None)
        if a is not None:
            a.end = end

    def put_fairshare(self, time, usage):
        self.fairshare_time = time
        self.fairshare = {k: dict(v) for k, v in usage.items()}

    def get_workload(self, workload_id):
        return self.workloads.get(workload_id)

    def _matching(self, user, queue, states, kinds, seen_by, array=None):
        return [w for w in self.workloads.values()
                if (array is None or (w.array or {}).get("id") == array)
                and (user is None or w.user == user) and (queue is None or w.queue == queue)
                and (states is None or w.state in states) and (kinds is None or w.kind in kinds)
                and (seen_by is None or w.user == seen_by[0] or w.queue in seen_by[1])]

    def get_workloads(self, *, user=None, queue=None, states=None, limit=None, kinds=None, seen_by=None,
                      newest_first=False, offset=0, array=None):
        out = sorted(self._matching(user, queue, states, kinds, seen_by, array), key=lambda w: w.seq,
                     reverse=newest_first)[offset:]
        return out[:limit] if limit else out

    def count_workloads(self, *, user=None, queue=None, states=None, kinds=None, seen_by=None, array=None):
        return len(self._matching(user, queue, states, kinds, seen_by, array))

    def get_events(self, *, workload_id=None, since=None, until=None, kinds=None, limit=None,
                   after_id=None, newest_first=False):
        events = [e for e in self.events if e.id > after_id] if after_id else self.events
        if newest_first:
            events = events[::-1]
        out = [e for e in events
               if (workload_id is None or e.workload_id == workload_id)
               and (since is None or e.time >= since) and (until is None or e.time < until)
               and (kinds is None or e.kind in kinds)]
        return out[:limit] if limit else out

    def last_event_id(self):
        return self.last_id

    def purge_history(self, *, workloads_before=None, events_before=None, allocations_before=None, batch=2000):
        gone = {}
        if workloads_before is not None:
            old = [w for w in self.workloads.values() if w.state in TERMINAL
                   and (w.ended_at if w.ended_at is not None else w.submitted_at) < workloads_before]
            for w in old:
                del self.workloads[w.id]
            self.purged_seq = max([self.purged_seq] + [w.seq for w in old])
            gone["workloads"] = len(old)
        if events_before is not None:
            kept = [e for e in self.events if e.time >= events_before or e.id == self.last_id]
            gone["events"] = len(self.events) - len(kept)
            self.events = kept
        if allocations_before is not None:
            kept = [a for a in self.allocations if a.end is None or a.end >= allocations_before]
            gone["allocations"] = len(self.allocations) - len(kept)
            self.allocations = kept
        return gone

    def get_allocations(self, start=None, end=None):
        return [a for a in self.allocations
                if (end is None or a.start < end) and (start is None or a.end is None or a.end > start)]
