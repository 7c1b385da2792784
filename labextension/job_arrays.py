"""A job array from a notebook: one handle on all its tasks (``jobs.submit(..., array="0-9%2")``).

A ``JobArray`` is a list of its tasks' ``Job`` handles (``sweep[3].logs()``), named by its first
task's id (``sweep.id``), with what acts on every task: ``counts()``, ``wait()``, ``cancel()``,
``hold()``, ``release()``, ``set_limit(n)``. ``after=sweep`` runs a job after every task (``w12[]``).
"""

from __future__ import annotations

import time

from .jobs import TERMINAL, WAITING, Client, Job, JobError

LIVE = (*WAITING, "admitted", "running", "preempting", "reclaiming")     # "cancelling" is on its way out
HOLD = "hold"              # the metadata key of a hold (scheduler.model.HOLD)


def holdable(w: dict) -> bool:
    """Waiting and not held back already (work held only for what it runs after may be)."""
    return w["state"] == "pending" or (w["state"] == "held" and HOLD not in (w.get("metadata") or {}))


def held_back(w: dict) -> bool:
    return HOLD in (w.get("metadata") or {})


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

    def _each(self, keep, act) -> list[dict]:
        return [act(w["id"]) for w in self.tasks() if keep(w)]

    def cancel(self) -> list[dict]:
        """Cancel every task still waiting or running; returns their records."""
        return self._each(lambda w: w["state"] in LIVE, self.client.cancel)

    def hold(self, reason: str = "") -> list[dict]:
        """Hold back every task that waits and is not held back already."""
        return self._each(holdable, lambda wid: self.client.hold(wid, reason))

    def set_limit(self, limit: int) -> dict:
        """From now on run at most ``limit`` tasks at a time (0: no limit); tasks running beyond a
        lowered limit go on."""
        answer = self.client.request("POST", f"workloads/{self.id}/array-limit", {"limit": limit})
        self.limit = answer["limit"]
        return answer

    def release(self) -> list[dict]:
        """Release every task held back (``hold``)."""
        return self._each(held_back, self.client.release)
