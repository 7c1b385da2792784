"""Job arrays: one submission, many tasks (Slurm's ``--array=0-99%10``).

An array is one submission run once per index: ``"array": "0-9"``, ``"1,3,5-11:2"``, and
``%N`` to run at most N tasks at a time (``"0-99%10"``). Each task is a workload of its own
(its own id, state, log, preemptions), accepted together or not at all, and each knows its
place through ``Workload.array``: ``{"id": <the first task's id>, "index": i, "size": n,
"limit": N or 0}``; the launchers give it ``COMPUTEHUB_ARRAY_ID``, ``COMPUTEHUB_ARRAY_TASK_ID``
and ``COMPUTEHUB_ARRAY_TASK_COUNT`` (``env``). Only batch and training work comes in arrays:
a notebook is one person's server, a service has replicas.

The cap is an admission rule (``Engine``): a task waits (``ARRAY_LIMIT``, holding nothing back
and preempting no one) while N tasks of its array hold GPUs, as Slurm's ``ArrayTaskThrottle``;
its owner may change it while the array runs (``ArrayLimits.set_array_limit``, Slurm's
``scontrol update ArrayTaskThrottle=``): tasks running beyond a lowered cap go on, and no new
one starts until fewer run.
"""

from __future__ import annotations

import re
from collections import Counter

from .errors import NotFound, ValidationError
from .model import TERMINAL, Workload

MAX_TASKS = 1000            # tasks in one array (Slurm's default MaxArraySize is 1001)
MAX_INDEX = 999_999
ARRAY_KINDS = ("batch", "training")
_RANGE = re.compile(r"^(\d{1,6})(?:-(\d{1,6})(?::(\d{1,6}))?)?\Z")
EXAMPLE = "like 0-9, 1,3,5-11:2 or 0-99%10 (at most 10 at a time)"


def parse(value) -> tuple[list[int], int]:
    """``(indexes in ascending order, limit)`` of an array spec; limit 0: no cap."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"array must be task indexes {EXAMPLE}; got {value!r}")
    text, _, cap = value.strip().partition("%")
    limit = 0
    if cap:
        if not cap.isdigit() or not 1 <= int(cap) <= MAX_TASKS:
            raise ValidationError(f"array: the number after % is how many tasks may run at a time, "
                                  f"1 to {MAX_TASKS}; got {cap!r}")
        limit = int(cap)
    indexes: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ValidationError(f"array: {part.strip()!r} is not an index or a range; write indexes {EXAMPLE}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            raise ValidationError(f"array: in {part.strip()!r} the range must go up (first-last:step, step ≥ 1)")
        if last > MAX_INDEX:
            raise ValidationError(f"array: task indexes go up to {MAX_INDEX}; got {last}")
        if (last - first) // step + 1 + len(indexes) > MAX_TASKS:
            raise ValidationError(f"array: more than {MAX_TASKS} tasks; split the work into several arrays")
        indexes.update(range(first, last + 1, step))
    return sorted(indexes), limit


def check_kind(kind: str) -> None:
    if kind not in ARRAY_KINDS:
        raise ValidationError(f"only batch and training work comes in arrays, not {kind} "
                              "(a notebook is one server; a service has --replicas)")


def record(first_id: str, index: int, size: int, limit: int) -> dict:
    return {"id": first_id, "index": index, "size": size, "limit": limit}


def env(array: dict | None) -> dict[str, str]:
    """What a launcher sets for a task (nothing for work that is not in an array)."""
    if not array:
        return {}
    return {"COMPUTEHUB_ARRAY_ID": array["id"], "COMPUTEHUB_ARRAY_TASK_ID": str(array["index"]),
            "COMPUTEHUB_ARRAY_TASK_COUNT": str(array["size"])}


def holding_by_array(holding) -> Counter:
    """How many tasks of each capped array hold an allocation (the cap counts these)."""
    return Counter(w.array["id"] for w in holding if w.array is not None and w.array["limit"])


def cap_words(array_id: str, running: int, limit: int) -> str:
    return (f"array {array_id} runs at most {limit} task{'s' if limit != 1 else ''} at a time "
            f"and {running} {'are' if running != 1 else 'is'} running; it starts when one of them ends")


class ArrayLimits:
    """The part of ``Scheduler`` that changes a job array's cap. Needs ``state``, ``store``,
    ``_now``, ``_tx`` and ``_event``."""

    def array_tasks(self, array_id: str) -> list[Workload]:
        """The live tasks of ``array_id`` (its first task's id), in index order."""
        return sorted((w for w in self.state.workloads.values()
                       if w.array is not None and w.array["id"] == array_id and w.state not in TERMINAL),
                      key=lambda w: w.seq)

    def set_array_limit(self, array_id: str, limit, now=None, actor: str = "") -> list[Workload]:
        """Run at most ``limit`` of the array's tasks at a time from now on (0: no cap). Returns its
        live tasks; NotFound when it has none."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_TASKS:
            raise ValidationError(f"limit must be a whole number of tasks from 0 (no limit) to {MAX_TASKS}; "
                                  f"got {limit!r}")
        tasks = self.array_tasks(array_id)
        if not tasks:
            raise NotFound(f"no job array {array_id!r} with tasks waiting or running")
        now = self._now(now)
        with self._tx():
            for w in tasks:
                w.array = {**w.array, "limit": limit}
            self.store.put_workloads(tasks)
            self._event(now, "array_limit", tasks[0], f"at most {limit} at a time" if limit else "no limit",
                        actor=actor, array=array_id, limit=limit)
        return tasks
