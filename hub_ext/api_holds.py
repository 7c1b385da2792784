"""``api/v1/workloads/{id}/hold`` and ``/release``: keep waiting work from starting, and let it go
(scheduler/holds.py). Its owner (and launchers, spawners) may hold and release it; an admin's hold
only an admin releases."""

from __future__ import annotations

from scheduler import ValidationError

from . import views
from .api_workloads import _OneWorkload

MAX_REASON = 500


def _body(handler, known: set[str]) -> dict:
    body = handler.json_body()
    unknown = set(body) - known
    if unknown:
        raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}"
                              + (f" (it takes {', '.join(sorted(known))})" if known else " (it takes none)"))
    return body


class WorkloadHoldHandler(_OneWorkload):
    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "hold this workload")
        reason = _body(self, {"reason"}).get("reason", "")
        if not isinstance(reason, str) or len(reason) > MAX_REASON:
            raise ValidationError(f"reason must be text of at most {MAX_REASON} characters")
        w = self.service.sched.hold(w.id, actor=caller.name, admin=caller.is_admin, reason=reason.strip())
        self.service.changed()
        self.write_json(views.workload(w))


class WorkloadReleaseHandler(_OneWorkload):
    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "release this workload")
        _body(self, set())          # none is needed; a malformed one is still refused
        w = self.service.sched.release(w.id, actor=caller.name, admin=caller.is_admin)
        self.service.changed()
        self.write_json(views.workload(w))
