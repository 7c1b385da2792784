"""``api/v1/workloads/{id}/array-limit``: how many of a job array's tasks may run at a time,
changed while it runs (scheduler/arrays.py; Slurm's ``scontrol update ArrayTaskThrottle=``), and
``api/v1/workloads/{id}/array-action``: cancel, hold, release, approve or reject every task of
it at once, in one transaction (scheduler/array_actions.py; Slurm's ``scancel 1234``).
``{id}`` is any task of the array; its owner (and launchers, spawners, admins) may change it;
approving and rejecting are an admin's."""

from __future__ import annotations

from scheduler import NotFound, ValidationError
from scheduler.array_actions import ACTIONS

from .api_holds import _body
from .api_workloads import STATES, _OneWorkload


class _ArrayHandler(_OneWorkload):
    def _array(self, workload_id, doing: str, admins_only: bool = False):
        try:
            caller, w = self._visible(workload_id)
        except NotFound:
            raise NotFound(f"no job array {workload_id!r} you may see (name it by any of its tasks' ids)") from None
        self.require(caller.is_admin if admins_only else caller.may_cancel(w), doing)
        if not w.array:
            raise ValidationError(f"workload {w.id} is not a task of a job array (submitted with array)")
        return caller, w.array["id"]


class ArrayLimitHandler(_ArrayHandler):
    async def post(self, workload_id):
        caller, array = self._array(workload_id, "change this job array")
        body = _body(self, {"limit"})
        if "limit" not in body:
            raise ValidationError("limit is required: how many tasks may run at a time (0: no limit)")
        tasks = self.service.sched.set_array_limit(array, body["limit"], actor=caller.name)
        self.service.changed()
        self.write_json({"array": array, "limit": body["limit"], "tasks": [t.id for t in tasks]})


class ArrayActionHandler(_ArrayHandler):
    async def post(self, workload_id):
        caller = self.caller            # a token without access to the service: 403 before anything
        body = _body(self, {"action", "reason", "states", "until"})
        action = body.get("action")
        if action not in ACTIONS:
            raise ValidationError(f"action is required, one of {', '.join(ACTIONS)}; got {repr(action)[:100]}")
        reason = body.get("reason", "")
        if action in ("cancel", "release", "top") and reason:
            raise ValidationError(f"a {action} takes no reason")
        decide = action in ("approve", "reject")
        if decide:                      # an admin's, whoever's the array is
            self.require(caller.is_admin, f"{action} work (custom:computehub:admin)")
        states = body.get("states")
        if states is not None and (not isinstance(states, list) or not states
                                   or not all(isinstance(x, str) and x in STATES for x in states)):
            raise ValidationError(f"states must be a list of workload states ({', '.join(STATES)}); "
                                  f"got {repr(states)[:200]}")
        _, array = self._array(workload_id, f"{action} this job array", admins_only=decide)
        if action == "cancel":
            reason = f"cancelled by {caller.name}"
        out = self.service.sched.act_on_array(array, action, actor=caller.name, admin=caller.is_admin,
                                              reason=reason, states=None if states is None else tuple(states),
                                              until=body.get("until"))
        self.service.changed()
        self.write_json({"array": array, "action": action, "tasks": [w.id for w in out.done],
                         "states": {w.id: w.state for w in out.done}, "refused": out.refused})
