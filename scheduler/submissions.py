"""Accepting work: validation, group commit and admins' approvals.

A submission is taken in three steps so that a service can keep its event loop
free while the database makes a batch durable:

1. ``prepare_submissions`` validates every spec against the current state and
   gives each accepted one its id (memory and store untouched);
2. ``write_submissions`` writes the accepted ones and their events in ONE
   transaction; it touches no in-memory state, so it may run on another thread;
3. ``apply_submissions`` adds them to the in-memory state (the scheduler sees
   them from its next cycle), or ``drop_submissions`` forgets a batch whose write
   failed (and rebuilds memory from the store when the commit's outcome is unknown).

Between 1 and 3 the batch counts as live work: a queue or priority class it
names cannot be deleted under it.

``submit_many`` runs the three in a row. A caller that runs step 2 elsewhere
must keep one batch in flight at a time and apply it before preparing the next.
"""

from __future__ import annotations

from collections import Counter
from copy import deepcopy
from dataclasses import dataclass, field, replace

from . import arrays, validation
from .errors import Conflict, SchedulerError, TooManyWaiting, ValidationError
from .holds import NO_NOTEBOOKS, begin_hold, hold_record
from .model import AWAITING_APPROVAL, HELD, HOLD, PENDING, REJECTED, Event, Workload
from .resources import fmt_amount, label, render


@dataclass
class SubmissionBatch:
    now: float
    results: list = field(default_factory=list)          # Workload or the SchedulerError refusing that spec
    accepted: list[Workload] = field(default_factory=list)
    next_seq: int = 0

    def events(self) -> list[Event]:
        out = []
        for w in self.accepted:
            out.append(Event(self.now, "submitted", w.id, "", {
                "user": w.user, "queue": w.queue, "priority": w.priority, "request": render(w.request),
                "workers": w.workers, **({"array": w.array} if w.array else {})}))
            if HOLD in w.metadata:
                out.append(Event(self.now, "held", w.id, w.metadata[HOLD]["reason"], {"actor": w.user}))
            if w.state == AWAITING_APPROVAL:
                out.append(Event(self.now, "approval_requested", w.id, w.reason, {}))
        return out


class SubmissionsMixin:
    """The part of ``Scheduler`` that accepts work (see the module docstring)."""

    # The most workloads one user may have waiting in line (pending, or accepted and not yet
    # applied); more are refused (429). 0: no cap. The service sets it
    # (ComputeHubService.max_waiting_per_user).
    max_waiting_per_user = 0

    def submit(self, spec: dict, now=None) -> Workload | list[Workload]:
        """Validate and accept a workload (a job array: its tasks, in index order). Once this
        returns it is durable."""
        out = self.submit_many([spec], now)[0]
        if isinstance(out, SchedulerError):
            raise out
        return out

    def submit_many(self, specs: list[dict], now=None) -> list[Workload | SchedulerError]:
        """Accept several submissions in ONE transaction (group commit): each entry of
        the result is the accepted workload (a job array: the list of its tasks, accepted
        together or not at all) or the error that refused that spec.
        If the transaction fails, the exception propagates and nothing was accepted."""
        batch = self.prepare_submissions(specs, now)
        try:
            self.write_submissions(batch)
        except BaseException as e:
            self.drop_submissions(batch, e)
            raise
        self.apply_submissions(batch)
        return batch.results

    def prepare_submissions(self, specs: list[dict], now=None) -> SubmissionBatch:
        self.ensure_current()
        batch = SubmissionBatch(now=self._now(now))
        seq = self.next_seq
        waiting = None
        for spec in specs:
            try:
                fields = validation.workload_fields(spec, self.state)
                indexes, limit = arrays.parse(spec["array"]) if spec.get("array") is not None else ([], 0)
                w = Workload(id=f"w{seq:07d}", seq=seq, submitted_at=batch.now, **fields)
                if indexes:
                    arrays.check_kind(w.kind)
                corr = [e for e in w.after if e.endswith(":corr")]      # task by task (pair_tasks)
                if corr and not indexes:
                    raise ValidationError("after …[]:corr pairs the tasks of two job arrays by index: submit "
                                          "an array (array)")
                w.after = [e for e in w.after if e not in corr]
                w.state = self.initial_state(w)
                begins = begin_hold(spec, w.user, w.kind, batch.now)
                if spec.get("hold") or begins:
                    if w.kind == "notebook":
                        raise ValidationError(NO_NOTEBOOKS)
                    w.metadata[HOLD] = begins or hold_record(w.user, False, batch.now, "held at submission")
                    w.state = HELD
                if w.state == HELD:
                    w.reason = self.waits_for(w)
                over = self._needs_approval(w)
                if over:
                    w.state, w.reason = AWAITING_APPROVAL, over
                tasks = self._array_tasks(w, indexes, limit) if indexes else [w]
                if corr:
                    self.pair_tasks(tasks, corr)
                if not over and self.max_waiting_per_user:      # last: it counts what it accepts
                    waiting = self._waiting_by_user() if waiting is None else waiting
                    self._check_waiting(w.user, waiting, len(tasks))
            except SchedulerError as e:
                batch.results.append(e)
                continue
            seq += len(tasks)
            batch.accepted.extend(tasks)
            batch.results.append(tasks if indexes else w)
        batch.next_seq = seq
        self.next_seq = seq          # reserved: a failed write leaves a gap, never a reused id
        self._unapplied.update((w.id, w) for w in batch.accepted)
        return batch

    def _waiting_by_user(self) -> Counter:
        """How many workloads each user has waiting in line: pending, or accepted and not yet
        applied (a batch being written), or held until the work it runs after has ended. (Work
        awaiting an admin's approval is not in line.)"""
        waiting = Counter(self.state.pending.by_user)
        waiting.update(self.state.held.by_user)
        waiting.update(w.user for w in self._unapplied.values()
                       if w.state in (PENDING, HELD) and w.id not in self.state.workloads)
        return waiting

    def _check_waiting(self, user: str, waiting: Counter, n: int = 1) -> None:
        if waiting[user] + n > self.max_waiting_per_user:
            already = f"{user} already has {waiting[user]} workloads waiting in line (pending)"
            if n == 1:
                raise TooManyWaiting(
                    f"{already}, the most one user may have here (the service's max_waiting_per_user): "
                    "cancel some, or submit more once some have started")
            raise TooManyWaiting(
                f"{already}; this array's {n} tasks would make {waiting[user] + n}, more than the "
                f"{self.max_waiting_per_user} one user may have here (the service's max_waiting_per_user): "
                "submit a smaller array, or cancel some")
        waiting[user] += n

    @staticmethod
    def _array_tasks(w: Workload, indexes: list[int], limit: int) -> list[Workload]:
        """One workload per index, ids in a row from ``w``'s; the array is named by the first."""
        return [replace(w, id=f"w{w.seq + i:07d}", seq=w.seq + i, request=dict(w.request),
                        node_selector=dict(w.node_selector), after=list(w.after), metadata=deepcopy(w.metadata),
                        array=arrays.record(w.id, index, len(indexes), limit))
                for i, index in enumerate(indexes)]

    def write_submissions(self, batch: SubmissionBatch) -> None:
        """Durable, or the exception propagates and nothing was written. Memory is not
        touched (a failure needs no reload), so this may run on a writer thread."""
        if batch.accepted:
            with self.store.transaction():
                self.store.add_new_workloads(batch.accepted)
                self.store.add_events(batch.events())

    def apply_submissions(self, batch: SubmissionBatch) -> None:
        """After a successful write: the scheduler sees them from its next cycle."""
        self.next_seq = max(self.next_seq, batch.next_seq)
        for w in batch.accepted:
            self._unapplied.pop(w.id, None)
            if w.id not in self.state.workloads:    # a reload meanwhile may have read it from the store
                self.state.add(w)

    def drop_submissions(self, batch: SubmissionBatch, error: BaseException | None = None) -> None:
        """After a failed write (``error``): nothing of the batch exists, unless the connection
        broke while committing (``StoreUnavailable.in_doubt``): then it may, and memory is
        rebuilt from the store (at once, or as soon as the store can be read)."""
        for w in batch.accepted:
            self._unapplied.pop(w.id, None)
        if getattr(error, "in_doubt", False):
            self._resync()

    def _needs_approval(self, w: Workload) -> str:
        above = self.state.tree.specs[w.queue].approval_above
        for k, v in w.total.items():
            if k in above and v > above[k]:
                return (f"asks for {fmt_amount(k, v)} {label(k)}; queue {w.queue} needs an admin's "
                        f"approval above {fmt_amount(k, above[k])}")
        return ""

    def approvals(self) -> list[Workload]:
        """Workloads waiting for an admin's decision, oldest first."""
        return self.workloads(states=(AWAITING_APPROVAL,))

    def decide(self, workload_id: str, approve: bool, now=None, actor: str = "",
               reason: str = "") -> Workload:
        """An admin approves (the workload joins the line, keeping its age, or, if it runs after
        other work, is held until the next cycle finds that ended) or rejects it."""
        w = self.get(workload_id)
        if w.state != AWAITING_APPROVAL:
            raise Conflict(f"workload {workload_id} is {w.state}, not awaiting approval")
        now = self._now(now)
        with self._tx():
            if approve:
                w.state, w.reason = (HELD, self.waits_for(w)) if w.after or HOLD in w.metadata else (PENDING, "")
            else:
                w.state, w.ended_at, w.reason = REJECTED, now, reason or "rejected by an admin"
            self.store.put_workload(w)
            self._event(now, "approved" if approve else "rejected", w, reason, actor=actor)
        if approve:
            (self.state.held if w.state == HELD else self.state.pending)[w.id] = w
        else:
            self.state.forget(w)
        return w
