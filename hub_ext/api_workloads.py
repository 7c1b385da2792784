"""``api/v1/workloads``: submit, list, get (with explanation), cancel, logs (status reports: api_status.py)."""

from __future__ import annotations

import asyncio
import os
import time

from scheduler import NotFound, ValidationError
from scheduler.model import HOLDING, KINDS, LIVE, PENDING, TERMINAL, run_label
from scheduler.updates import WAITING
from scheduler.what_if import preview_steps

from . import views
from .base import APIError, BaseHandler
from .job_logs import read_after, read_tail
from .snapshot import explanations

STATES = (*LIVE, *TERMINAL)
DRY_RUN_GAP = 1.0       # seconds between one caller's dry runs (PATCH ...?dry_run=true)
SUBMIT_FIELDS = {"name", "queue", "kind", "priority", "resources", "workers", "gpu_model", "time_limit",
                 "checkpoint_every", "node_selector", "user", "metadata", "after", "hold", "array", "mail", "begin"}


class WorkloadsHandler(BaseHandler):
    async def get(self):
        caller = self.caller
        self.require(caller.sees_anything, "see workloads")
        svc = self.service
        states = self.get_query_arguments("state") or None
        user = self.get_query_argument("user", None)
        queue = self.get_query_argument("queue", None)
        array = self.get_query_argument("array", None)
        kinds = self.get_query_arguments("kind") or None
        for what, given, known in (("state", states or (), STATES), ("kind", kinds or (), KINDS)):
            bad = [v for v in given if v not in known]
            if bad:
                raise APIError(400, "invalid", f"unknown {what} {bad[0]!r}; one of {', '.join(known)}")
        limit = self.query_int("limit", 100, 1, 10_000)
        offset = self.query_int("offset", 0, 0, 10**9)
        order = self.get_query_argument("order", "oldest")
        if order not in ("oldest", "newest"):
            raise APIError(400, "invalid", f"order must be 'oldest' (submission order) or 'newest', not {order!r}")
        explain = self.get_query_argument("explain", "false")
        if explain not in ("true", "false"):
            raise APIError(400, "invalid", f"explain must be true or false, not {explain!r}")
        access = svc.sched.state.tree.access
        if states and any(s in TERMINAL for s in states):
            # Ended work lives only in the database, a year of it perhaps: the filters, the
            # caller's view and the page go into the query, so only one page is ever read.
            store = svc.sched.store
            where = dict(user=user, queue=queue, states=tuple(states), kinds=kinds and tuple(kinds),
                         seen_by=seen_by(caller, access), array=array)
            page = store.get_workloads(**where, newest_first=order == "newest", limit=limit, offset=offset)
            total = store.count_workloads(**where)
        else:
            items = svc.sched.workloads(user=user, queue=queue, states=tuple(states) if states else None)
            visible = [w for w in items
                       if (kinds is None or w.kind in kinds) and (array is None or (w.array or {}).get("id") == array)
                       and caller.may_see(w, access.get(w.queue, ()))]
            if order == "newest":
                visible.reverse()
            page, total = visible[offset:offset + limit], len(visible)
        items = [with_report_token(views.workload(w, svc.positions), w, caller, svc) for w in page]
        if explain == "true":
            # Each waiting one's explanation, as GET workloads/{id} gives it: one request for a page.
            # (A page read from the database holds copies: the live workload is the one explained.)
            live = svc.sched.state.workloads
            said = await explanations(svc, [live[w.id] for w in page if w.state in WAITING and w.id in live])
            for d in items:
                if d["id"] in said:
                    d["explanation"] = said[d["id"]]
        self.write_json({"workloads": items, "total": total, "offset": offset, "limit": limit, "order": order})

    async def post(self):
        caller = self.caller
        self.require(caller.can_submit, "submit work (custom:computehub:submit)")
        body = self.json_body()
        unknown = set(body) - SUBMIT_FIELDS
        if unknown:
            raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}")
        spec = await self.service.submission_for(caller, body)
        w = await self.service.submit(spec)
        tasks = w if isinstance(w, list) else None       # a job array: its first task, and every id
        w = tasks[0] if tasks else w
        self.set_header("Location", self.service.path(f"api/v1/workloads/{w.id}"))
        d = views.workload(w)
        if tasks:
            d["tasks"] = [t.id for t in tasks]
        self.write_json(d, status=201)


def seen_by(caller, access) -> tuple[str | None, tuple[str, ...]] | None:
    """``caller.may_see`` as the store's filter: None (everything), or the caller's own work
    and the queues of the teams they lead."""
    if caller.on_behalf or caller.all_teams:
        return None
    own = caller.name if caller.kind == "user" and caller.can_submit else None
    return own, tuple(sorted(name for name, groups in access.items() if caller.leads(groups)))


def with_report_token(d: dict, w, caller, svc) -> dict:
    """The job's report token (``report_tokens``) for those who may act for it (its owner, the
    launchers and spawners) while it holds GPUs (admitted, running, being stopped): the
    launcher hands it to the job. Good for this run only. Pending work has none (lists of
    10,000 stay as they were)."""
    if w.state in HOLDING and caller.may_cancel(w):
        d["report_token"] = svc.report_tokens.issue(w.id, run_label(w.admitted_at))
    return d


class _OneWorkload(BaseHandler):
    """What the handlers of ``workloads/{id}...`` share. Each implements only its own
    methods (inheriting ``WorkloadHandler`` made ``DELETE .../logs`` cancel the workload)."""

    def _visible(self, workload_id: str):
        caller = self.caller
        w = self.service.sched.get(workload_id)      # NotFound → 404
        if not caller.may_see(w, self.service.sched.state.tree.access.get(w.queue, ())):
            raise NotFound(f"no workload {workload_id!r}")   # never reveal others' ids
        return caller, w


class WorkloadHandler(_OneWorkload):
    max_wait = 30.0

    async def get(self, workload_id):
        caller, w = self._visible(workload_id)
        wait = self.query_float("wait", 0.0)
        if not 0 <= wait <= self.max_wait:
            raise APIError(400, "invalid", f"query parameter wait must be between 0 and {self.max_wait:g} seconds")
        seen = self.get_query_argument("state", None)
        if seen is not None and seen not in STATES:
            raise APIError(400, "invalid", f"query parameter state must be one of {', '.join(STATES)}")
        if wait:
            w = await self._until_state_leaves(w, seen or w.state, min(wait, self.service.long_poll_max))
        d = with_report_token(views.workload(w, self.service.positions), w, caller, self.service)
        if w.state not in TERMINAL:
            ex = d["explanation"] = await self.service.explanation(w)     # made once a cycle, off the loop
            if w.state == PENDING and "position" not in d and "position" in ex:
                # Submitted since the last cycle: its position comes from the explanation.
                d["position"], d["position_in_queue"] = ex["position"], ex["position_in_queue"]
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

    async def patch(self, workload_id):
        """Change waiting work (running work: its name, checkpoints, a shorter limit); with
        ``?tasks=all``, every waiting task of its job array (``&state=held``: those held only;
        scheduler/updates.py); with
        ``?dry_run=true``, only say what it would be and where it would stand (what_if.py)."""
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "change this workload")
        tasks = self.get_query_argument("tasks", "one")
        if tasks not in ("one", "all"):
            raise APIError(400, "invalid", f"tasks must be 'one' (this workload) or 'all' (every waiting task of "
                                           f"its job array), not {tasks!r}")
        states = tuple(self.get_query_arguments("state")) or None
        if states is not None and (tasks != "all" or set(states) - set(WAITING)):
            raise APIError(400, "invalid", "state picks which waiting tasks of a job array change, with tasks=all: "
                                           f"any of {', '.join(WAITING)}")
        dry_run = self.get_query_argument("dry_run", "false")
        if dry_run not in ("true", "false"):
            raise APIError(400, "invalid", f"dry_run must be true or false, not {dry_run!r}")
        if dry_run == "true" and tasks == "all":
            raise APIError(400, "invalid", "dry_run tries a change on one workload: name one task, without tasks=all")
        changes = self.json_body()
        if "queue" in changes or "priority" in changes:
            self.service.check_line(caller, {"kind": w.kind, "queue": changes.get("queue", w.queue),
                                             "priority": changes.get("priority", w.priority)})
        sched, who = self.service.sched, dict(actor=caller.name, admin=caller.is_admin)
        if dry_run == "true":
            # Each is a simulation of the line ahead (~0.4 s of the worker thread's core deep in a line
            # of 15,000: bench/what_if.py): one caller gets one a second, whatever they try. A change
            # refused is refused first: it costs no simulation, and no turn.
            sched.checked_update(w, changes, admin=True)
            last, at = self.service.dry_runs.get(caller.name, float("-inf")), time.monotonic()
            if at - last < DRY_RUN_GAP:
                raise APIError(429, "too_many_requests", "one dry run a second for each caller (each simulates "
                                                         "the line ahead): try it again in a moment")
            self.service.dry_runs[caller.name] = at
            # Its own estimate, not the line plan's: the change is simulated the same way (the line ahead).
            kept = await self.service.estimates.own(w) if w.state == PENDING or w.after else None
            (then, before, after), _ = await self.service.estimates.settle(
                preview_steps(sched, w.id, changes, sched.clock(), kept))
            return self.write_json({**views.workload(then), "dry_run": True, "explanation": after,
                                    "explanation_before": before})
        changed = sched.update_array(w.id, changes, states=states, **who) if tasks == "all" else \
            [sched.update(w.id, changes, **who)]
        self.service.changed()
        d = views.workload(changed[0] if tasks == "all" else sched.get(w.id))
        if tasks == "all":
            d["tasks"] = [t.id for t in changed]
        self.write_json(d)

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
        given = self.request.query_arguments
        if "tail" in given and "after" in given:
            raise APIError(400, "invalid", "give tail (the last lines) or after (the lines after an offset), "
                                           "not both")
        tail = self.query_int("tail", 200, 1, 100_000)
        after = self.query_int("after", -1, 0, 2**63 - 1)
        path = os.path.join(self.service.logs_dir, f"{w.id}.log")
        try:
            piece = read_tail(path, tail) if after < 0 else read_after(path, after, final=w.state in TERMINAL)
        except FileNotFoundError:
            raise NotFound(f"no logs recorded for workload {w.id} (yet)") from None
        except ValueError as e:
            raise APIError(400, "invalid", str(e)) from None
        self.write_json({"id": w.id, **piece.as_json()})
