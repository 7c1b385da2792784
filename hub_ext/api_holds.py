"""``api/v1/workloads/{id}/hold`` and ``/release``: keep waiting work from starting, and let it go
(scheduler/holds.py). Its owner (and launchers, spawners) may hold and release it; an admin's hold
only an admin releases. ``/mail``: what live work mails its owner about (scheduler/mail_types.py)."""

from __future__ import annotations

from scheduler import ValidationError

from . import views
from .api_workloads import _OneWorkload


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
        body = _body(self, {"reason", "until"})                  # checked by the scheduler
        w = self.service.sched.hold(w.id, actor=caller.name, admin=caller.is_admin, reason=body.get("reason", ""),
                                    until=body.get("until"))
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


class WorkloadTopHandler(_OneWorkload):
    """``POST workloads/{id}/top``: first among its owner's waiting work of its queue and class
    (scheduler/tops.py; Slurm's ``scontrol top``)."""

    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "reorder this workload")
        _body(self, set())
        w = self.service.sched.top(w.id, actor=caller.name)
        self.service.changed()
        self.write_json(views.workload(w))


class WorkloadMailHandler(_OneWorkload):
    """``POST workloads/{id}/mail`` ``{"mail": ["end"]}``: what live work mails its owner about from
    now on (hub_ext/mail.py); ``[]`` for nothing. For a task of a job array, the whole array's."""

    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "change this workload's mail")
        body = _body(self, {"mail"})
        if "mail" not in body:
            raise ValidationError('send {"mail": [...]}: begin, end, fail, requeue or all; [] for none')
        self.service.check_mail_wanted({"mail": body["mail"], "user": w.user})
        changed = self.service.sched.set_mail(w.id, body["mail"], actor=caller.name)
        self.write_json({**views.workload(next(t for t in changed if t.id == w.id)),
                         "tasks": [t.id for t in changed]})
