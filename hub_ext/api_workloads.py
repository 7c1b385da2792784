"""``api/v1/workloads``: submit, list, get (with explanation), cancel, logs, status reports."""

from __future__ import annotations

import asyncio
import os
import time

from scheduler import NotFound, ValidationError
from scheduler.model import AWAITING_APPROVAL, HOLDING, KINDS, PENDING, TERMINAL

from . import views
from .base import APIError, BaseHandler

STATES = (AWAITING_APPROVAL, PENDING, *HOLDING, *TERMINAL)
SUBMIT_FIELDS = {"name", "queue", "kind", "priority", "resources", "workers", "gpu_model", "time_limit",
                 "node_selector", "user", "metadata"}


class WorkloadsHandler(BaseHandler):
    async def get(self):
        caller = self.caller
        self.require(caller.sees_anything, "see workloads")
        svc = self.service
        states = self.get_query_arguments("state") or None
        user = self.get_query_argument("user", None)
        queue = self.get_query_argument("queue", None)
        kind = self.get_query_argument("kind", None)
        for what, given, known in (("state", states or (), STATES), ("kind", [] if kind is None else [kind], KINDS)):
            bad = [v for v in given if v not in known]
            if bad:
                raise APIError(400, "invalid", f"unknown {what} {bad[0]!r}; one of {', '.join(known)}")
        limit = self.query_int("limit", 100, 1, 10_000)
        offset = self.query_int("offset", 0, 0, 10**9)
        if states and any(s in TERMINAL for s in states):
            items = svc.sched.store.get_workloads(user=user, queue=queue, states=tuple(states))
        else:
            items = svc.sched.workloads(user=user, queue=queue, states=tuple(states) if states else None)
        specs = svc.sched.state.tree.specs
        visible = [w for w in items if (kind is None or w.kind == kind)
                   and caller.may_see(w, specs.get(w.queue))]
        page = visible[offset:offset + limit]
        self.write_json({"workloads": [views.workload(w, svc.positions) for w in page],
                         "total": len(visible), "offset": offset, "limit": limit})

    async def post(self):
        caller = self.caller
        self.require(caller.can_submit, "submit work (custom:computehub:submit)")
        body = self.json_body()
        unknown = set(body) - SUBMIT_FIELDS
        if unknown:
            raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}")
        spec = await self.service.submission_for(caller, body)
        w = await self.service.submit(spec)
        self.set_header("Location", self.service.path(f"api/v1/workloads/{w.id}"))
        self.write_json(views.workload(w), status=201)


class _OneWorkload(BaseHandler):
    """What the handlers of ``workloads/{id}...`` share. Each implements only its own
    methods (inheriting ``WorkloadHandler`` made ``DELETE .../logs`` cancel the workload)."""

    def _visible(self, workload_id: str):
        caller = self.caller
        w = self.service.sched.get(workload_id)      # NotFound → 404
        if not caller.may_see(w, self.service.sched.state.tree.specs.get(w.queue)):
            raise NotFound(f"no workload {workload_id!r}")   # never reveal others' ids
        return caller, w


class WorkloadHandler(_OneWorkload):
    max_wait = 30.0

    async def get(self, workload_id):
        _, w = self._visible(workload_id)
        wait = self.query_float("wait", 0.0)
        if not 0 <= wait <= self.max_wait:
            raise APIError(400, "invalid", f"query parameter wait must be between 0 and {self.max_wait:g} seconds")
        seen = self.get_query_argument("state", None)
        if seen is not None and seen not in STATES:
            raise APIError(400, "invalid", f"query parameter state must be one of {', '.join(STATES)}")
        if wait:
            w = await self._until_state_leaves(w, seen or w.state, min(wait, self.service.long_poll_max))
        d = views.workload(w, self.service.positions)
        if w.state not in TERMINAL:
            d["explanation"] = self.service.explanation(w)     # computed once per cycle
        self.write_json(d)

    async def _until_state_leaves(self, w, seen: str, wait: float):
        """Long poll: answer as soon as the workload's state differs from ``seen`` (a spawner
        learns of its admission within the cycle that makes it, without polling fast)."""
        svc = self.service
        deadline = time.monotonic() + wait
        while w.state == seen and not svc.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            changed = svc.next_change()     # taken before the check below: no wake-up is lost
            try:
                await asyncio.wait_for(changed, remaining)
            except asyncio.TimeoutError:
                pass
            w = svc.sched.get(w.id)
        return w

    async def delete(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "cancel this workload")
        reason = f"cancelled by {caller.name}"
        w = self.service.sched.cancel(w.id, reason=reason)
        self.service.changed()
        self.write_json(views.workload(w))


class WorkloadLogsHandler(_OneWorkload):
    async def get(self, workload_id):
        _, w = self._visible(workload_id)
        tail = self.query_int("tail", 200, 1, 100_000)
        path = os.path.join(self.service.logs_dir, f"{w.id}.log")
        if not os.path.exists(path):
            raise NotFound(f"no logs recorded for workload {w.id} (yet)")
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()[-tail:]
        self.write_json({"id": w.id, "lines": lines})


class WorkloadStatusHandler(_OneWorkload):
    """Launchers and spawners report what happened to admitted work."""

    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.on_behalf, "report workload status (custom:computehub:submit-on-behalf)")
        body = self.json_body()
        state = body.get("state")
        sched = self.service.sched
        notes = _status_notes(body)
        if state == "running":
            if w.state != "running" or not notes:    # a second "running" may only add notes
                w = sched.mark_running(w.id)
            if notes:
                w = sched.annotate(w.id, notes)
        elif state == "update":
            if not notes:
                raise ValidationError("an update needs at least one of: " + ", ".join(NOTE_FIELDS))
            w = sched.annotate(w.id, notes)
        elif state in ("finished", "failed"):
            code = body.get("exit_code", 0 if state == "finished" else 1)
            if isinstance(code, bool) or not isinstance(code, int):
                raise ValidationError("exit_code must be a whole number")
            lost = body.get("node_lost", False)
            if not isinstance(lost, bool):
                raise ValidationError("node_lost must be true or false")
            if lost and state != "failed":
                raise ValidationError("node_lost goes with state failed")
            w = sched.mark_finished(w.id, exit_code=code, reason=str(body.get("reason", ""))[:2000],
                                    node_lost=lost)
        elif state == "stopped":
            w = sched.mark_stopped(w.id)
        elif state == "idle":
            since = body.get("idle_since")
            if isinstance(since, bool) or not isinstance(since, (int, float)) or not 0 <= since <= time.time() + 60:
                raise ValidationError("idle_since must be a UNIX time in seconds, not in the future")
            d = sched.report_idle(w.id, float(since))
            if d.action == "release":
                self.service.metrics.reclaims.labels(w.queue).inc()
            self.service.changed()
            self.write_json(d.to_dict())
            return
        else:
            raise APIError(400, "invalid", "state must be one of running, update, finished, failed, stopped, idle")
        self.service.changed()
        self.write_json(views.workload(w))


NOTE_FIELDS = ("endpoint", "message", "ready", "node", "restarts")


def _status_notes(body: dict) -> dict:
    """What a launcher may record about live work (shown to its owner; ``endpoint`` is where
    ``serve/{id}/`` forwards). Checked here, at the edge."""
    notes = {}
    for key in NOTE_FIELDS:
        if key not in body:
            continue
        v = body[key]
        if key == "endpoint":
            if not isinstance(v, str) or not v.startswith(("http://", "https://")) or len(v) > 500:
                raise ValidationError("endpoint must be an http(s) URL of at most 500 characters")
        elif key == "ready":
            if not isinstance(v, bool):
                raise ValidationError("ready must be true or false")
        elif key == "restarts":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValidationError("restarts must be a whole number ≥ 0")
        elif not isinstance(v, str) or len(v) > 2000:
            raise ValidationError(f"{key} must be text of at most 2000 characters")
        notes[key] = v
    return notes
