"""Acting on a job array as one (Slurm's ``scancel 1234``, ``scontrol hold 1234``): cancel, hold,
release, approve, reject or put first (``top``) each of its tasks that the action applies to, in ONE store
transaction. A sweep of 1,000 tasks is then one request and one commit, not a thousand, and
either every change of it is durable or none is.

Each task goes through the same operation as when it is named alone (``cancel``, ``hold``,
``release``, ``decide``), with the same events in the audit log; their rows are written together
at the end (``Gathered``). A task the operation refuses
for a reason of its own (an admin's hold, released by its owner) is reported beside the others
(``ArrayOutcome.refused``) and changes nothing; if it refuses every task, its first refusal
is the answer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from . import validation
from .errors import Conflict, Forbidden, NotFound, ValidationError
from .holds import MAX_REASON
from .model import AWAITING_APPROVAL, CANCELLING, HELD, HOLD, PENDING, RECLAIMING, Workload

ACTIONS = ("cancel", "hold", "release", "approve", "reject", "top")
# Which tasks each action is for, said as "job array w50 has no tasks <that>".
APPLIES_TO = {
    "cancel": "still live and not being stopped already",
    "hold": "waiting and not held already",
    "release": "held back (hold)",
    "approve": "awaiting approval",
    "reject": "awaiting approval",
    "top": "waiting",
}


@dataclass
class ArrayOutcome:
    array: str
    action: str
    done: list[Workload] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)     # task id: why it was left as it was


def _applies(action: str, w: Workload, admin: bool, timed: bool = False) -> bool:
    if action == "cancel":            # of the live ones (array_tasks), those not on their way out
        return w.state not in (CANCELLING, RECLAIMING)
    if action == "hold":              # (timed: a hold with an end may change another's end)
        held = w.metadata.get(HOLD)
        return w.state == PENDING or (w.state == HELD and (
            not held or (admin and not held.get("admin"))
            or (timed and (admin or not held.get("admin")))))
    if action == "release":
        return w.state == HELD and bool(w.metadata.get(HOLD))
    if action == "top":
        return w.state in (PENDING, HELD, AWAITING_APPROVAL)
    return w.state == AWAITING_APPROVAL


class ArrayActions:
    """The part of ``Scheduler`` that acts on every task of an array. Needs ``array_tasks``,
    ``batch``, ``_now``, ``cancel``, ``hold``, ``release`` and ``decide``."""

    def act_on_array(self, array_id: str, action: str, now=None, actor: str = "", admin: bool = False,
                     reason: str = "", states: tuple[str, ...] | None = None, until: float | None = None
                     ) -> ArrayOutcome:
        """``action`` (one of ``ACTIONS``) on each live task of ``array_id`` (its first task's id)
        that it applies to (and, with ``states``, that is in one of them: a panel's row of the
        array's pending tasks cancels those only). NotFound when the array has no live task,
        Conflict when none is one the action applies to. ``until``: a hold's end (``Holds.hold``)."""
        if action not in ACTIONS:
            raise ValidationError(f"action must be one of {', '.join(ACTIONS)}; got {action!r}")
        if action in ("hold", "reject"):
            reason = validation.free_text("reason", reason, MAX_REASON if action == "hold" else 2000).strip()
        live = self.array_tasks(array_id)
        if not live:
            raise NotFound(f"no job array {array_id!r} with tasks waiting or running")
        if until is not None and action != "hold":
            raise ValidationError(f"a {action} takes no until (a hold's end)")
        tasks = [w for w in live if _applies(action, w, admin, until is not None)
                 and (states is None or w.state in states)]
        if not tasks:
            among = f" among those {' or '.join(s.replace('_', ' ') for s in states)}" if states is not None else ""
            raise Conflict(f"job array {array_id} has no tasks {APPLIES_TO[action]}{among} "
                           f"({len(live)} live: {_states(live)})")
        now = self._now(now)
        out = ArrayOutcome(array_id, action)
        first_refusal: Exception | None = None
        with self.batch():
            store = self.store
            self.store = gathered = Gathered(store)
            try:
                for i, w in enumerate(tasks):
                    # Put first: the tasks in index order, so each is stamped a moment before the next.
                    at = now - i * 1e-6 if action == "top" else now
                    try:
                        out.done.append(self._act(action, w.id, at, actor, admin, reason, until))
                    except (Conflict, Forbidden) as e:     # raised before the task's change began
                        out.refused[w.id] = str(e)
                        first_refusal = first_refusal or e
                gathered.flush()
            finally:
                self.store = store
        if not out.done and first_refusal is not None:
            raise first_refusal
        return out

    def _act(self, action: str, workload_id: str, now: float, actor: str, admin: bool, reason: str,
             until: float | None = None) -> Workload:
        if action == "cancel":
            return self.cancel(workload_id, now, reason=reason or f"cancelled by {actor or 'user'}")
        if action == "hold":
            return self.hold(workload_id, now, actor=actor, admin=admin, reason=reason, until=until)
        if action == "release":
            return self.release(workload_id, now, actor=actor, admin=admin)
        if action == "top":
            return self.top(workload_id, now, actor=actor)
        return self.decide(workload_id, action == "approve", now, actor=actor, reason=reason)


class Gathered:
    """The store, but the workloads and events an array's tasks write are kept and written at
    the end (``flush``) in one statement each, not three statements per task; everything else
    goes through at once. Within one transaction only, where nothing reads them back; only the
    thread acting on the array is gathered (the service writes submissions on a thread of its
    own, through the same ``Scheduler.store``, meanwhile)."""

    def __init__(self, store):
        self._store, self._workloads, self._events = store, {}, []
        self._thread = threading.get_ident()

    def put_workload(self, w: Workload) -> None:
        if threading.get_ident() != self._thread:
            return self._store.put_workload(w)
        self._workloads[w.id] = w

    def put_workloads(self, ws) -> None:
        if threading.get_ident() != self._thread:
            return self._store.put_workloads(ws)
        self._workloads.update((w.id, w) for w in ws)

    def add_event(self, event) -> None:
        if threading.get_ident() != self._thread:
            return self._store.add_event(event)
        self._events.append(event)

    def add_events(self, events) -> None:
        if threading.get_ident() != self._thread:
            return self._store.add_events(events)
        self._events.extend(events)

    def flush(self) -> None:
        self._store.put_workloads(list(self._workloads.values()))
        self._store.add_events(self._events)

    def __getattr__(self, name):
        return getattr(self._store, name)


def _states(tasks: list[Workload]) -> str:
    counts: dict[str, int] = {}
    for w in tasks:
        counts[w.state] = counts.get(w.state, 0) + 1
    return ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items())
