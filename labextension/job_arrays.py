"""A job array from a notebook: one handle on all its tasks (``jobs.submit(..., array="0-9%2")``).

A ``JobArray`` is a list of its tasks' ``Job`` handles (``sweep[3].logs()``), named by its first
task's id (``sweep.id``), with what acts on every task: ``counts()``, ``wait()``, ``cancel()``,
``hold()``, ``release()``, ``set_limit(n)`` (each one request: the service acts on every task in one
transaction). ``after=sweep`` runs a job after every task (``w12[]``).
"""

from __future__ import annotations

import time
import urllib.parse

from .jobs import TERMINAL, Client, Job, JobError


def act_on_array(client: Client, array_id: str, action: str, reason: str = "", states=None, until=None) -> dict:
    """``action`` (cancel, hold, release) on each task of a job array it applies to (``states``:
    and that is now in one of them), in one request: ``{"array", "action", "tasks": [ids acted
    on], "states": {id: state}, "refused": {id: why it was left as it was}}``."""
    return client.request("POST", f"workloads/{urllib.parse.quote(array_id, safe='')}/array-action",
                          {"action": action, **({"reason": reason} if reason else {}),
                           **({"states": list(states)} if states else {}), **({"until": until} if until else {})})


class JobArray(list):
    def __init__(self, client: Client, first: dict):
        super().__init__(Job(client, {"id": tid, "state": first["state"]}) for tid in first["tasks"])
        self.client, self.id, self.last = client, first["id"], first
        self.limit = (first.get("array") or {}).get("limit") or 0

    def __repr__(self) -> str:
        cap = f", at most {self.limit} at a time" if self.limit else ""
        return f"<JobArray {self.id}: {len(self)} tasks{cap}>"

    @property
    def after_entry(self) -> str:
        """How ``after=`` names every task of it (``jobs.after_ids``)."""
        return f"{self.id}[]"

    def tasks(self) -> list[dict]:
        """Every task's record now, in index order (each with ``array.index``)."""
        return self.client.array_tasks(self.id)

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state now, e.g. ``{"running": 2, "pending": 8}``."""
        out: dict[str, int] = {}
        for w in self.tasks():
            out[w["state"]] = out.get(w["state"], 0) + 1
        return out

    def wait(self, timeout: float | None = None, every: float = 2.0) -> list[dict]:
        """Until every task has ended; returns their records."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            tasks = self.tasks()
            live = [w for w in tasks if w["state"] not in TERMINAL]
            if not live:
                return tasks
            if deadline is not None and time.monotonic() > deadline:
                raise JobError(f"array {self.id}: {len(live)} of {len(tasks)} tasks still live after {timeout:g} s")
            time.sleep(every)

    def _act(self, action: str, reason: str = "", states=None) -> dict:
        try:
            return act_on_array(self.client, self.id, action, reason, states)
        except JobError as e:
            if e.status in (404, 409):      # no task left that it applies to: nothing to do
                return {"array": self.id, "action": action, "tasks": [], "states": {}, "refused": {}}
            raise

    def cancel(self, states=None) -> dict:
        """Cancel every task still waiting or running (``states``, e.g. ``["pending"]``: only those
        now in one of them): ``{"tasks": [ids], "states": {id: state}, ...}``."""
        return self._act("cancel", states=states)

    def hold(self, reason: str = "") -> dict:
        """Hold back every task that waits and is not held back already."""
        return self._act("hold", reason)

    def set_limit(self, limit: int) -> dict:
        """From now on run at most ``limit`` tasks at a time (0: no limit); tasks running beyond a
        lowered limit go on."""
        answer = self.client.request("POST", f"workloads/{self.id}/array-limit", {"limit": limit})
        self.limit = answer["limit"]
        return answer

    def top(self) -> dict:
        """Put its waiting tasks first among my own waiting work of their queue and class, in
        index order (``computehub top --array``)."""
        return self._act("top")

    def release(self) -> dict:
        """Release every task held back (``hold``); ``refused`` names those an admin holds."""
        return self._act("release")
