"""``api/v1/workloads/{id}/status`` and ``api/v1/workloads/status``: what launchers and
spawners report about admitted work (running, finished, failed, stopped, notes, idle, saved
checkpoints); ``api/v1/workloads/{id}/checkpoint``: a job says it saved one (with its report token).

The batch form carries many reports in one request and writes them in one store
transaction: a launcher that starts and ends dozens of jobs a second pays for one
request and one commit per look instead of one each (bench/slurm.py).
"""

from __future__ import annotations

import time

from scheduler import NotFound, SchedulerError, ValidationError
from scheduler.model import run_label

from . import views
from .api_workloads import _OneWorkload
from .base import APIError, BaseHandler
from .report_tokens import bearer

NOTE_FIELDS = ("endpoint", "message", "ready", "node", "restarts")
STATUS_STATES = ("running", "update", "checkpoint", "finished", "failed", "stopped", "idle")
MAX_BATCH = 1000


def status_notes(body: dict) -> dict:
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


def checkpoint_time(body: dict) -> float | None:
    """``at`` of a checkpoint report: when the work saved, a UNIX time in seconds (absent:
    now). A clock a minute ahead of the service's is tolerated (counted as now)."""
    at = body.get("at")
    if at is None:
        return None
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at <= time.time() + 60:
        raise ValidationError("at must be the UNIX time in seconds the checkpoint was saved, not in the future")
    return float(at)


def on_stop(body: dict) -> bool:
    """``on_stop`` of a checkpoint report: the save was made when the work was told to stop."""
    v = body.get("on_stop", False)
    if not isinstance(v, bool):
        raise ValidationError("on_stop must be true or false")
    return v


def apply_report(service, w, body: dict) -> dict:
    """Apply one status report to workload ``w``; the answer's body (the workload, or the
    idle policy's decision). Raises a ``SchedulerError``/``APIError`` before changing
    anything when the report is wrong or no longer applies."""
    state = body.get("state")
    sched = service.sched
    notes = status_notes(body)
    if state == "running":
        if w.state != "running" or not notes:    # a second "running" may only add notes
            w = sched.mark_running(w.id)
        if notes:
            w = sched.annotate(w.id, notes)
    elif state == "update":
        if not notes:
            raise ValidationError("an update needs at least one of: " + ", ".join(NOTE_FIELDS))
        w = sched.annotate(w.id, notes)
    elif state == "checkpoint":
        w = sched.report_checkpoint(w.id, at=checkpoint_time(body), on_stop=on_stop(body))
    elif state in ("finished", "failed"):
        code = body.get("exit_code", 0 if state == "finished" else 1)
        if isinstance(code, bool) or not isinstance(code, int):
            raise ValidationError("exit_code must be a whole number")
        lost = body.get("node_lost", False)
        if not isinstance(lost, bool):
            raise ValidationError("node_lost must be true or false")
        if lost and state != "failed":
            raise ValidationError("node_lost goes with state failed")
        w = sched.mark_finished(w.id, exit_code=code, reason=str(body.get("reason", ""))[:2000], node_lost=lost)
    elif state == "stopped":
        w = sched.mark_stopped(w.id)
    elif state == "idle":
        since = body.get("idle_since")
        if isinstance(since, bool) or not isinstance(since, (int, float)) or not 0 <= since <= time.time() + 60:
            raise ValidationError("idle_since must be a UNIX time in seconds, not in the future")
        d = sched.report_idle(w.id, float(since))
        if d.action == "release":
            service.metrics.reclaims.labels(w.queue).inc()
        return d.to_dict()
    else:
        raise APIError(400, "invalid", "state must be one of " + ", ".join(STATUS_STATES))
    return views.workload(w)


class WorkloadStatusHandler(_OneWorkload):
    """One report: ``POST workloads/{id}/status``."""

    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.on_behalf, "report workload status (custom:computehub:submit-on-behalf)")
        out = apply_report(self.service, w, self.json_body())
        self.service.changed()
        self.write_json(out)


class StatusBatchHandler(BaseHandler):
    """Many reports: ``POST workloads/status`` with ``{"reports": [{"id": ..., "state": ...,
    ...}, ...]}``. Each report gets its own result, in order: ``{"id", "status": 200, "body"}``
    or ``{"id", "status": 4xx, "error", "message"}``; one report's mistake does not stop the
    others. All accepted reports are written in one transaction: if that fails the answer is
    an error for the whole request and none of them happened (report them again)."""

    async def post(self):
        caller = self.caller
        self.require(caller.on_behalf, "report workload status (custom:computehub:submit-on-behalf)")
        reports = self.json_body().get("reports")
        if not isinstance(reports, list) or not 1 <= len(reports) <= MAX_BATCH:
            raise ValidationError(f"reports must be a list of 1 to {MAX_BATCH} status reports")
        svc = self.service
        sched, access = svc.sched, svc.sched.state.tree.access
        results = []
        with sched.batch():
            for item in reports:
                wid = item.get("id") if isinstance(item, dict) else None
                wid = wid if isinstance(wid, str) else None     # the answer echoes text only
                try:
                    if not wid:
                        raise ValidationError("each report needs an object with the workload's id (text)")
                    w = sched.get(wid)
                    if not caller.may_see(w, access.get(w.queue, ())):
                        raise NotFound(f"no workload {wid!r}")
                    results.append({"id": wid, "status": 200, "body": apply_report(svc, w, item)})
                except SchedulerError as e:
                    results.append({"id": wid, "status": e.status, **e.to_dict()})
                except APIError as e:
                    results.append({"id": wid, "status": e.status_code, "error": e.code, "message": e.message})
        svc.changed()
        self.write_json({"results": results})


class WorkloadCheckpointHandler(_OneWorkload):
    """``POST workloads/{id}/checkpoint`` (body ``{"at": UNIX time, "on_stop": bool}``, both
    optional): running work saved a checkpoint (``on_stop``: when told to stop, preempted).
    For the job itself: with its own report token (``$COMPUTEHUB_REPORT_TOKEN``, valid here
    and for this workload's current run only; see ``report_tokens``) or its owner's hub token (a launcher
    reports with ``"state": "checkpoint"`` instead). Preemption then knows what stopping it
    would lose."""

    async def prepare(self):
        self._report_token = bearer(self.request.headers.get("Authorization", ""))
        if self._report_token is None:
            await super().prepare()     # a hub token or login, as everywhere else

    async def post(self, workload_id):
        sched = self.service.sched
        if self._report_token is not None:
            try:
                w = sched.get(workload_id)
            except NotFound:
                w = None        # refused like a wrong token: a token tells nothing of other work
            tokens = self.service.report_tokens
            if w is None or not tokens.valid(self._report_token, w.id, run_label(w.admitted_at)):
                raise APIError(403, "forbidden", f"this report token is not the one of workload {workload_id!r} "
                                                 "in its current run; use the job's own $COMPUTEHUB_REPORT_TOKEN "
                                                 "(a token of an earlier run of it is void)")
        else:
            caller, w = self._visible(workload_id)
            self.require(caller.may_cancel(w), "report checkpoints of this workload")
        body = self.json_body()
        unknown = set(body) - {"at", "on_stop"}
        if unknown:
            raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}; only at, on_stop")
        w = sched.report_checkpoint(w.id, at=checkpoint_time(body), on_stop=on_stop(body))
        self.service.changed()
        self.write_json(views.workload(w))
