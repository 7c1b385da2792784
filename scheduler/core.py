"""The scheduler's public face: one object the service, the spawners and replay all use.

``Scheduler`` owns the in-memory ``ClusterState`` and ``Engine`` and writes
every change through a ``Store`` in one transaction per operation (one per
cycle for the cycle's decisions); how memory never runs ahead of the store is
in ``durable.py``.
"""

from __future__ import annotations

import time as _time

from . import ledger, preemption, reclaim, validation
from .array_actions import ArrayActions
from .arrays import ArrayLimits
from .durable import DurableMemory
from .cancels import Cancels
from .dependencies import Dependencies
from .holds import Holds
from .tops import Tops
from .mail_types import MailWishes
from .start_deadline import StartDeadline
from .stop_deadline import StopDeadline
from .engine import CycleResult, EngineConfig
from .errors import Conflict, NotFound
from .model import (ADMITTED, ENDS_AS, FAILED, FINISHED, HOLDING, PREEMPTED, PREEMPTING,
                    RECLAIMING, RUNNING, STOP_OVERDUE, STOPPING, STOPPING_SINCE, TERMINAL, Allocation, Event, NodeSpec,
                    PriorityClass, QueueSpec, Workload)
from .store import MemoryStore, Store
from .submissions import SubmissionsMixin
from .updates import Updates


class Scheduler(DurableMemory, Cancels, Dependencies, Holds, ArrayLimits, ArrayActions, MailWishes, StartDeadline,
                StopDeadline, SubmissionsMixin, Tops, Updates):
    def __init__(self, store: Store | None = None, config: EngineConfig | None = None,
                 clock=_time.time, prices: dict[str, float] | None = None):
        self.store = store if store is not None else MemoryStore()
        self.config = config or EngineConfig()
        self.clock = clock
        self.prices = dict(prices or {})
        self.last: CycleResult | None = None
        self._unapplied: dict[str, Workload] = {}     # prepared submissions not yet applied
        self._ended_dependencies: dict[str, Workload | None] = {}    # dependencies.py: ended work held work names
        self._stale = False     # memory may hold changes of a failed transaction (see ensure_current)
        self._load()

    # --- lifecycle: _load, ensure_current, _tx and batch are in durable.py -------------

    def _live(self):
        """Pending and running work, and submissions being written (see submissions.py)."""
        yield from self.state.workloads.values()
        yield from self._unapplied.values()

    def _now(self, now):
        return self.clock() if now is None else float(now)

    def _event(self, now, kind, w: Workload | None = None, reason="", **data):
        self.store.add_event(Event(now, kind, w.id if w else None, reason, data))

    # --- configuration (admin) ---------------------------------------------------

    def put_queue(self, spec, now=None, actor: str = "") -> QueueSpec:
        spec = validation.queue(spec)
        specs = {q.name: q for q in self.state.tree.specs.values()}
        before = specs.get(spec.name)
        specs[spec.name] = spec
        validation.queue_tree(list(specs.values()))
        now = self._now(now)
        with self._tx():
            self.store.put_queue(spec)
            self._event(now, "queue_updated", actor=actor, queue=spec.name,
                        before=before.to_dict() if before else None, after=spec.to_dict())
        self.state.rebuild_tree(list(specs.values()))
        return spec

    def delete_queue(self, name: str, now=None, actor: str = "") -> None:
        specs = dict(self.state.tree.specs)
        if name not in specs:
            raise NotFound(f"unknown queue {name!r}")
        if any(s.parent == name for s in specs.values()):
            raise Conflict(f"queue {name!r} has sub-queues; delete or move them first")
        live = [w.id for w in self._live() if w.queue == name]
        if live:
            raise Conflict(f"queue {name!r} still has {len(live)} pending or running workload(s)")
        before = specs.pop(name)
        with self._tx():
            self.store.delete_queue(name)
            self._event(self._now(now), "queue_deleted", actor=actor, queue=name, before=before.to_dict())
        self.state.rebuild_tree(list(specs.values()))

    def put_class(self, spec, now=None, actor: str = "") -> PriorityClass:
        pc = validation.priority_class(spec)
        before = self.state.classes.get(pc.name)
        with self._tx():
            self.store.put_class(pc)
            self._event(self._now(now), "class_updated", actor=actor, priority_class=pc.name,
                        before=before.to_dict() if before else None, after=pc.to_dict())
        self.state.classes[pc.name] = pc
        return pc

    def delete_class(self, name: str, now=None, actor: str = "") -> None:
        if name not in self.state.classes:
            raise NotFound(f"unknown priority class {name!r}")
        if any(w.priority == name for w in self._live()):
            raise Conflict(f"priority class {name!r} is used by pending or running workloads")
        before = self.state.classes[name]
        with self._tx():
            self.store.delete_class(name)
            self._event(self._now(now), "class_deleted", actor=actor, priority_class=name,
                        before=before.to_dict())
        del self.state.classes[name]

    def put_node(self, spec, now=None, actor: str = "") -> NodeSpec:
        spec = validation.node(spec)
        before = self.state.inventory.nodes.get(spec.name)
        if before is not None:
            for w in self.state.holders_on(spec.name):
                for a in w.placement:
                    if a.node == spec.name and any(g >= spec.gpus for g in a.gpus):
                        raise Conflict(f"node {spec.name!r}: GPU indices in use by {w.id} exceed {spec.gpus} GPUs")
        with self._tx():
            self.store.put_node(spec)
            self._event(self._now(now), "node_updated", actor=actor, node=spec.name,
                        before=before.spec.to_dict() if before else None, after=spec.to_dict())
        self.state.put_node(spec)
        return spec

    def set_node_flags(self, name: str, *, draining: bool | None = None, healthy: bool | None = None,
                       now=None, actor: str = "") -> NodeSpec:
        n = self.state.inventory.nodes.get(name)
        if n is None:
            raise NotFound(f"unknown node {name!r}")
        d = n.spec.to_dict()
        if draining is not None:
            d["draining"] = bool(draining)
        if healthy is not None:
            d["healthy"] = bool(healthy)
        return self.put_node(d, now=now, actor=actor)

    def remove_node(self, name: str, now=None, actor: str = "") -> list[Workload]:
        """The node is gone: its workloads lose their allocation (requeued or failed by class)."""
        if name not in self.state.inventory.nodes:
            raise NotFound(f"unknown node {name!r}")
        now = self._now(now)
        lost = self.state.holders_on(name)
        with self._tx():
            for w in lost:
                self._end_holding(w, now, "node_lost", f"node {name} was removed", state=FAILED,
                                  requeue=True)
            self.store.delete_node(name)
            self._event(now, "node_removed", actor=actor, node=name, workloads=[w.id for w in lost])
        self.state.inventory.remove(name)
        for w in lost:
            if w.state in TERMINAL:
                self.state.forget(w)
        return lost

    # --- workloads -------------------------------------------------------------

    def get(self, workload_id: str) -> Workload:
        self.ensure_current()
        w = self.state.workloads.get(workload_id) or self.store.get_workload(workload_id)
        if w is None:
            raise NotFound(f"no workload {workload_id!r}")
        return w

    def mark_running(self, workload_id: str, now=None) -> Workload:
        w = self.get(workload_id)
        if w.state != ADMITTED:
            raise Conflict(f"workload {workload_id} is {w.state}, not admitted")
        now = self._now(now)
        with self._tx():
            w.state, w.started_at = RUNNING, now
            self.store.put_workload(w)
            self._event(now, "started", w, "", placement=[a.to_dict() for a in w.placement])
        return w

    def annotate(self, workload_id: str, values: dict, now=None) -> Workload:
        """Record what a launcher learnt about live work (an endpoint, a message) in its
        ``metadata['status']``; durable, so a restarted service still knows it."""
        w = self.get(workload_id)
        if w.state in TERMINAL:
            raise Conflict(f"workload {workload_id} has ended ({w.state})")
        status = dict(w.metadata.get("status") or {})
        status.update(values)
        with self._tx():
            w.metadata = {**w.metadata, "status": status}
            self.store.put_workload(w)
        return w

    def report_checkpoint(self, workload_id: str, at: float | None = None, now=None,
                          on_stop: bool = False) -> Workload:
        """Running work saved a checkpoint at ``at`` (default: now; a little later than now,
        another machine's clock, counts as now). From then on a preemption is known to lose
        exactly the work since then (``preemption.since_checkpoint``), and a swap waiting
        for this victim to save may go ahead. A report older than the latest is kept out. Two
        reports of one run show how often the work saves (``checkpoint_seen_every``), which
        then tells when its next save is due (swaps waiting for it, ETAs). ``on_stop``: the
        save was made when the work was told to stop (preempted, in its grace period): from
        then on it is known to save on stop (``saves_on_stop``), and preempting it loses only
        its restart."""
        w = self.get(workload_id)
        if on_stop and w.state not in STOPPING:
            raise Conflict(f"workload {workload_id} is {w.state}; a save on stop is reported while it "
                           "is being preempted")
        if w.state not in (RUNNING, *STOPPING):
            raise Conflict(f"workload {workload_id} is {w.state}; only running work reports checkpoints")
        now = self._now(now)
        at = now if at is None else min(float(at), now)
        if at < w.started_at:
            raise Conflict(f"a checkpoint saved at {at:.3f} is older than the current run of "
                           f"{workload_id}, started at {w.started_at:.3f} (UNIX times)")
        new = {}
        if on_stop and not w.saves_on_stop:
            new["saves_on_stop"] = True
        if w.checkpointed_at is None or at > w.checkpointed_at:
            if w.checkpointed_at is not None and w.checkpointed_at >= w.started_at and not on_stop:
                new["checkpoint_seen_every"] = at - w.checkpointed_at     # two periodic saves of one run
            new["checkpointed_at"] = at
        if new:
            with self._tx():
                for k, v in new.items():
                    setattr(w, k, v)
                self.store.put_workload(w)
        return w

    def mark_finished(self, workload_id: str, now=None, exit_code: int = 0, reason: str = "",
                      node_lost: bool = False) -> Workload:
        """The workload ended: finished (exit 0) or failed; when its node was lost (not its
        own doing) it requeues, keeping its place by age, if its class requeues."""
        w = self.get(workload_id)
        if w.state not in HOLDING:
            raise Conflict(f"workload {workload_id} is {w.state}; only running work can finish")
        now = self._now(now)
        if w.state in ENDS_AS:          # cancelled or reclaimed, and now ended (stopped, or on its own)
            return self._end_stopping(w, now, f"it ended ({reason or f'exit code {exit_code}'})")
        state = FINISHED if exit_code == 0 and not node_lost else FAILED
        with self._tx():
            w.exit_code = exit_code
            self._end_holding(w, now, "node_lost" if node_lost else state,
                              reason or ("exit code %d" % exit_code), state=state, requeue=node_lost)
        if w.state in TERMINAL:
            self.state.forget(w)
        return w

    def mark_stopped(self, workload_id: str, now=None) -> Workload:
        """A preempted workload has stopped: its resources return; it requeues or ends. A
        cancelled or reclaimed one (cancels.py) ends so."""
        w = self.get(workload_id)
        if w.state not in STOPPING:
            raise Conflict(f"workload {workload_id} is {w.state}, not being preempted")
        now = self._now(now)
        if w.state in ENDS_AS:          # cancelled or reclaimed: it ends so
            return self._end_stopping(w, now, "stopped")
        by = w.metadata.get("preempted_by", "")
        with self._tx():
            self._end_holding(w, now, "stopped", f"preempted by {by}", state=PREEMPTED, requeue=True)
        if w.state in TERMINAL:
            self.state.forget(w)
        return w

    def _end_holding(self, w: Workload, now: float, kind: str, reason: str, *, state: str,
                     requeue: bool = False) -> None:
        """Release what ``w`` holds, record ``kind``, then requeue it (if asked and its
        class allows) or end it in ``state``. Call inside a transaction."""
        # Count its usage up to now in fair share before it stops being held.
        self.engine.fairshare.advance(now, self.state.tree)
        self.store.put_fairshare(self.engine.fairshare.time, self.engine.fairshare.snapshot())
        self.state.release(w)
        if STOPPING_SINCE in w.metadata:    # it has stopped: a later preemption counts afresh
            w.metadata = {k: v for k, v in w.metadata.items() if k not in (STOPPING_SINCE, STOP_OVERDUE)}
        self.store.close_allocation(w.id, now)
        self._event(now, kind, w, reason, placement=[a.to_dict() for a in w.placement])
        cls = self.state.classes.get(w.priority)
        if requeue and cls is not None and cls.requeue:
            self.state.requeue(w, now)
            self._event(now, "requeued", w, reason)
        else:
            w.state, w.ended_at, w.reason = state, now, reason
            self.state.pending.pop(w.id, None)
        self.store.put_workload(w)

    # --- the cycle ---------------------------------------------------------------

    def cycle(self, now=None) -> CycleResult:
        """Run one scheduling cycle and make its decisions durable in one transaction. The cycle
        decides inside the transaction: if the database is down, memory is left as it was."""
        now = self._now(now)
        with self._tx():
            self.release_due(now)       # begin times that have come (holds.py)
            self.release_held(now)
            res = self.engine.cycle(now)
            for v, _ in res.preempted:
                if v.state in TERMINAL:         # released at once (replay) and not requeued
                    v.ended_at = now
            # One write for all: with victims released at once (replay), their GPUs may go to
            # work admitted in this cycle, and moved work may land where other moved work was.
            self.store.put_workloads([v for v, _ in res.preempted] + res.admitted)
            for v, by in res.preempted:
                lost = res.lost.get(v.id)
                saves = preemption.saves_on_stop(v, self.state.classes.get(v.priority))
                self._event(now, "preempted", v, f"preempted by {by.id} ({by.priority}, queue {by.queue}): "
                            f"{preemption.why(v, by)}{preemption.lost_words(lost, saves)}",
                            preemptor=by.id, placement=[a.to_dict() for a in v.placement],
                            **({} if lost is None else {"lost_s": lost}))
                if v.state != PREEMPTING:      # released at once (replay)
                    self.store.close_allocation(v.id, now)
                    if v.state in TERMINAL:
                        self.state.workloads.pop(v.id, None)
            for w in res.admitted:
                self.store.open_allocation(Allocation(w.id, w.user, w.queue, self._booked_flavor(w), w.gpus, now,
                                                      array_id=w.array["id"] if w.array else None))
                self._event(now, "admitted", w, "", placement=[a.to_dict() for a in w.placement])
            self.store.put_fairshare(now, self.engine.fairshare.snapshot())
        self.last = res
        return res

    def _booked_flavor(self, w) -> str:
        """What the ledger books a workload's GPUs as: the model it asked for, else the model of
        the nodes it got (priced as what it uses), else 'any'."""
        if w.gpu_model or not w.gpus:
            return w.flavor
        nodes = self.state.inventory.nodes
        models = {nodes[a.node].spec.gpu_model if a.node in nodes else None for a in w.placement}
        return (models.pop() or "any") if len(models) == 1 else "any"

    # --- idle reclamation --------------------------------------------------------

    def report_idle(self, workload_id: str, idle_since: float, now=None) -> reclaim.IdleDecision:
        """Apply the queue's idle policy to a running workload idle since ``idle_since``."""
        w = self.get(workload_id)
        if w.state not in (ADMITTED, RUNNING):
            raise Conflict(f"workload {workload_id} is {w.state}; only running work can be idle")
        now = self._now(now)
        policy = self.state.tree.specs[w.queue].idle
        d = reclaim.decide(w, policy, idle_since, now)
        if d.action == reclaim.WARN:
            with self._tx():
                w.idle_warned_at = now
                self.store.put_workload(w)
                self._event(now, "idle_warning", w,
                            f"idle for {d.idle_seconds / 60:.0f} min; its GPUs will be released at "
                            f"{d.release_at}" if d.release_at else f"idle for {d.idle_seconds / 60:.0f} min",
                            idle_seconds=d.idle_seconds, release_at=d.release_at)
        elif d.action == reclaim.RELEASE:
            # It keeps its GPUs until whatever runs it reports it stopped (cancels.py): the
            # notebook watch has the hub stop the server, whose spawner then reports its end.
            why = f"idle for {d.idle_seconds / 60:.0f} min (queue limit {policy.release_after / 60:.0f} min)"
            with self._tx():
                self._begin_stop(w, now, RECLAIMING, why, f"{why}; its GPUs return once it has stopped")
                self._event(now, "gpu_returned", w, "", gpus=d.gpus,
                            gpu_hours_returned=d.gpu_hours_returned)
        return d

    # --- reading -------------------------------------------------------------------

    def workloads(self, *, user=None, queue=None, states=None) -> list[Workload]:
        self.ensure_current()
        out = [w for w in self.state.workloads.values()
               if (user is None or w.user == user) and (queue is None or w.queue == queue)
               and (states is None or w.state in states)]
        return sorted(out, key=lambda w: w.seq)

    def events(self, **filters) -> list[Event]:
        return self.store.get_events(**filters)

    def usage(self, start: float, end: float, by: str = "user") -> list[dict]:
        return ledger.usage(self.store.get_allocations(start, end), start, end, by, self.prices)

    def explain(self, workload_id: str, now=None) -> dict:
        from .explain import explain

        return explain(self, self.get(workload_id), self._now(now))

    def preview_update(self, workload_id: str, changes: dict, now=None,
                       explained: dict | None = None) -> tuple[Workload, dict, dict]:
        """What ``update`` would make of it, and its explanation now and then; nothing changes
        (``what_if.preview``)."""
        from .what_if import preview

        return preview(self, workload_id, changes, self._now(now), explained)
