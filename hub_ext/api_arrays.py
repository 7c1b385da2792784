"""``api/v1/workloads/{id}/array-limit``: how many of a job array's tasks may run at a time,
changed while it runs (scheduler/arrays.py; Slurm's ``scontrol update ArrayTaskThrottle=``).
``{id}`` is any task of the array; its owner (and launchers, spawners, admins) may change it."""

from __future__ import annotations

from scheduler import ValidationError

from .api_holds import _body
from .api_workloads import _OneWorkload


class ArrayLimitHandler(_OneWorkload):
    async def post(self, workload_id):
        caller, w = self._visible(workload_id)
        self.require(caller.may_cancel(w), "change this job array")
        if not w.array:
            raise ValidationError(f"workload {w.id} is not a task of a job array (submitted with array)")
        body = _body(self, {"limit"})
        if "limit" not in body:
            raise ValidationError("limit is required: how many tasks may run at a time (0: no limit)")
        tasks = self.service.sched.set_array_limit(w.array["id"], body["limit"], actor=caller.name)
        self.service.changed()
        self.write_json({"array": w.array["id"], "limit": body["limit"], "tasks": [t.id for t in tasks]})
