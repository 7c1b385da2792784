"""Changing accepted work (Slurm's ``scontrol update JobId=…``, Kueue's priority change).

Waiting work (pending, held, awaiting approval) may change what it asks for: ``resources``
(merged into the request: ``{"gpu": 4}`` changes the GPUs only, 0 takes a resource out),
``workers``, ``gpu_model``, ``time_limit``, ``checkpoint_every``, ``queue``, ``priority`` and
``name``. Each change is checked as a submission would be (the same ``validation``), and either
all of a request's changes happen or none.

Its place in line: shrinking, renaming and a shorter limit keep it. Growing any resource or
the workers, or another queue or class, counts its wait from now, so that a placeholder
submitted early earns nothing (Slurm keeps the place; a small job that grows later would
then jump everyone who asked for that much honestly). Growing above its queue's approval
threshold sends it back to an admin; a change that brings work awaiting approval under it
lets it join the line.

Work holding GPUs (admitted, running) may change its ``name`` and ``checkpoint_every``, and
its ``time_limit`` downwards; only an admin raises a time limit or takes it away, for running
and waiting work alike (as in Slurm: a longer limit would buy a backfill slot the work did
not ask for). Notebooks are not changed: their spawn decides what they ask for.
"""

from __future__ import annotations

from . import validation
from .errors import Conflict, Forbidden, ValidationError
from .model import AWAITING_APPROVAL, HELD, HOLD, PENDING, TERMINAL, Event, Workload
from .resources import GPU, is_flavor, render

WAITING_FIELDS = ("name", "resources", "workers", "gpu_model", "time_limit", "checkpoint_every", "queue",
                  "priority")
RUNNING_FIELDS = ("name", "time_limit", "checkpoint_every")
WAITING = (PENDING, HELD, AWAITING_APPROVAL)
# What a task's checked change depends on besides its request (update_array checks each such once).
_ASKED = ("user", "queue", "kind", "priority", "workers", "gpu_model", "time_limit", "checkpoint_every", "name")
SHOWN = ("name", "request", "workers", "gpu_model", "time_limit", "checkpoint_every", "queue", "priority")


class Updates:
    """The part of ``Scheduler`` that changes accepted work. Needs ``get``, ``state``, ``store``,
    ``_now``, ``_tx``, ``_needs_approval``, ``waits_for`` and ``array_tasks``."""

    def update(self, workload_id: str, changes: dict, now=None, actor: str = "", admin: bool = False) -> Workload:
        """Change ``workload_id`` as ``changes`` says (module docstring). ``admin``: the caller may
        raise a time limit. ValidationError for a change a submission could not make, Forbidden
        for a longer limit asked by its owner, Conflict for work in a state that cannot change so."""
        w = self.get(workload_id)
        self._apply_updates([(w, self.checked_update(w, changes, admin))], now, actor)
        return w

    def update_array(self, workload_id: str, changes: dict, now=None, actor: str = "",
                     admin: bool = False, states: tuple[str, ...] | None = None) -> list[Workload]:
        """The same change to every waiting task of ``workload_id``'s job array (running tasks go
        on as they are; with ``states``, only those waiting in one of them: a panel's row of the
        array's held tasks), in one transaction: all of them or, if one is refused, none. Returns
        the tasks it looked at, each as it is now."""
        w = self.get(workload_id)
        if w.array is None:
            raise ValidationError(f"workload {w.id} is not in a job array")
        if states is not None and (not states or set(states) - set(WAITING)):
            raise ValidationError(f"states: waiting states only, any of {', '.join(WAITING)}; got {list(states)}")
        tasks = [t for t in self.array_tasks(w.array["id"]) if t.state in (states or WAITING)]
        if not tasks:
            among = f" ({' or '.join(states)})" if states else ""
            raise Conflict(f"no task of job array {w.array['id']} is waiting{among}: "
                           "running tasks change one at a time")
        checked: dict[tuple, dict] = {}     # an array's tasks mostly ask the same: checked once
        plans = []
        for t in tasks:
            key = (t.state, tuple(sorted(t.request.items())), tuple(sorted(t.node_selector.items())),
                   *(getattr(t, k) for k in _ASKED))
            if key not in checked:
                checked[key] = self.checked_update(t, changes, admin)
            plans.append((t, checked[key]))
        self._apply_updates(plans, now, actor)
        return tasks

    def _apply_updates(self, plans: list[tuple[Workload, dict]], now, actor: str) -> None:
        plans = [(w, {k: (getattr(w, k), v) for k, v in fields.items() if getattr(w, k) != v},
                  asks_more(w, fields)) for w, fields in plans]
        plans = [p for p in plans if p[1]]
        if not plans:
            return
        now = self._now(now)
        events = []
        with self._tx():
            for w, diff, grows in plans:
                was = w.state
                for k, (_, v) in diff.items():
                    setattr(w, k, dict(v) if isinstance(v, dict) else v)     # tasks share no request
                if w.state in WAITING:
                    self._requeue_after_update(w, now, grows)
                events.append(Event(now, "updated", w.id, ", ".join(sorted(diff)), dict(
                    actor=actor, before={k: _shown(k, old) for k, (old, _) in diff.items()},
                    after={k: _shown(k, new) for k, (_, new) in diff.items()},
                    **({"state": [was, w.state]} if w.state != was else {}),
                    **({"wait_restarted": True} if grows and w.state in (PENDING, HELD) else {}))))
                if w.state == AWAITING_APPROVAL and was != AWAITING_APPROVAL:
                    events.append(Event(now, "approval_requested", w.id, w.reason, {}))
            self.store.put_workloads([w for w, _, _ in plans])
            self.store.add_events(events)

    def checked_update(self, w: Workload, changes: dict, admin: bool) -> dict:
        """The fields ``changes`` would give ``w`` (all of ``SHOWN``), or the error refusing it."""
        if not isinstance(changes, dict) or not changes:
            raise ValidationError(f"say what to change: any of {', '.join(WAITING_FIELDS)}")
        unknown = sorted(set(changes) - set(WAITING_FIELDS))
        if unknown:
            raise ValidationError(f"{', '.join(unknown)} cannot be changed; what can: {', '.join(WAITING_FIELDS)}")
        if w.state in TERMINAL:
            raise Conflict(f"workload {w.id} is {w.state}: ended work cannot be changed")
        if w.kind == "notebook":
            raise Conflict("a notebook asks for what its spawn chose; stop it (or cancel the spawn) and start "
                           "it again with other options")
        if w.state not in WAITING:
            fixed = sorted(set(changes) - set(RUNNING_FIELDS))
            if fixed:
                raise Conflict(f"workload {w.id} is {w.state.replace('_', ' ')}: only its "
                               f"{', '.join(RUNNING_FIELDS)} can change now, not {', '.join(fixed)}; cancel it "
                               "and submit it again to change what it holds")
        spec = {"user": w.user, "queue": w.queue, "kind": w.kind, "priority": w.priority,
                "resources": render({k: v for k, v in w.request.items() if not is_flavor(k)}),
                "workers": w.workers, "gpu_model": w.gpu_model, "node_selector": w.node_selector,
                "time_limit": w.time_limit, "checkpoint_every": w.checkpoint_every, "name": w.name}
        for k, v in changes.items():
            if k == "resources":
                spec["resources"] = _merged(spec["resources"], v)
                if "gpu_model" not in changes and (any(is_flavor(r) for r in v) or not v.get(GPU, 1)):
                    spec["gpu_model"] = None    # a flavor names the model; no GPUs, no model
            else:
                spec[k] = v
        fields = {k: getattr(w, k) for k in SHOWN}
        # Running work is not checked against the queue and nodes again: they may have changed
        # since it started, and its name or limit has nothing to do with them.
        fields.update(validation.workload_fields(spec, self.state) if w.state in WAITING
                      else validation.run_fields(spec))
        fields = {k: fields[k] for k in SHOWN}
        if not admin and _longer(w.time_limit, fields["time_limit"]):
            raise Forbidden(f"only an admin may give workload {w.id} more time ({_limit(w.time_limit)} now, "
                            f"{_limit(fields['time_limit'])} asked); a shorter limit you may set yourself")
        return fields

    def _requeue_after_update(self, w: Workload, now: float, grows: bool) -> None:
        """Waiting work after a change: sent back for approval, let into the line, or left where
        it is (its wait restarted if it grew)."""
        over = self._needs_approval(w)
        if w.state == AWAITING_APPROVAL:
            if over:
                w.reason = over
                return
            held = bool(w.after) or HOLD in w.metadata
            w.state, w.reason = (HELD, self.waits_for(w)) if held else (PENDING, "")
            (self.state.held if held else self.state.pending)[w.id] = w
        elif over and grows:
            self.state.pending.pop(w.id, None)
            self.state.held.pop(w.id, None)
            w.state, w.reason = AWAITING_APPROVAL, over
        if grows:
            w.eligible_at = now


def _merged(request: dict, changes) -> dict:
    """``changes`` over the request: a GPU model's count alone is the GPU count too."""
    if not isinstance(changes, dict):
        raise ValidationError(f"resources must be a mapping like {{'gpu': 2, 'cpu': '4'}}, not {changes!r}")
    out = {**request, **changes}
    flavors = [k for k in changes if is_flavor(k)]
    if flavors and GPU not in changes:
        out[GPU] = changes[flavors[0]]
    return out


def asks_more(w: Workload, fields: dict) -> bool:
    """Whether the change asks for more, or for another line (queue, class)."""
    old, new = w.total, {k: v * fields["workers"] for k, v in fields["request"].items()}
    return (fields["queue"] != w.queue or fields["priority"] != w.priority
            or any(v > old.get(k, 0) for k, v in new.items()))


def _longer(old: float | None, new: float | None) -> bool:
    return old is not None and (new is None or new > old)


def _limit(seconds: float | None) -> str:
    return "no limit" if seconds is None else f"{seconds:g} s"


def _shown(field: str, value):
    return render(value) if field == "request" else value

