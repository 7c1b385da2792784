"""How the command line shows job arrays, ``--array`` (acting on every task of one), and a task
named by its array and index (``w50[3]``, Slurm's ``1234_3``)."""

from __future__ import annotations

import re

from .cli import UsageError
from .client import ComputeHubError

WAITING = ("held", "pending", "awaiting_approval")
LIVE = (*WAITING, "admitted", "running", "preempting", "cancelling", "reclaiming")
ENDED = ("finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")
TASK = re.compile(r"^w?(\d{1,12})\[(\d{1,6})\]\Z")
ARRAY = re.compile(r"^w?(\d{1,12})(\[\])?\Z")
DONE = {"cancel": "cancelled", "hold": "held", "release": "released", "approve": "approved", "reject": "rejected",
        "top": "put first"}
ARRAY_FLAG = "The ids name job arrays (the id of an array's first task): act on each of its tasks."
STATE_FLAG = ("With --array: only the tasks now in these states, commas between them, e.g. 'pending' or "
              "'held,pending' (Slurm's scancel --state).")


def array_id(text: str) -> str:
    """An array named as ids are written, ``w50``, ``50`` or ``w50[]`` (as ``--after`` names all its
    tasks), as the service writes it: ``w0000050``; anything else as it is (the service says)."""
    m = ARRAY.match(text.strip())
    return f"w{int(m.group(1)):07d}" if m else text


def states_of(text: str, array: bool, allowed: tuple[str, ...] = LIVE) -> tuple[str, ...] | None:
    """``--state``'s states (None: not given), each one of ``allowed``; UsageError saying what is
    wrong (also for --state without --array: one workload is acted on whatever its state)."""
    given = tuple(dict.fromkeys(s.strip().lower().replace(" ", "_") for s in text.split(",") if s.strip()))
    if not given:
        return None
    if not array:
        raise UsageError("--state picks tasks of job arrays: give --array too")
    unknown = [s for s in given if s not in allowed]
    if unknown:
        raise UsageError(f"--state: {unknown[0]!r} is not a state it may pick; one or more of {', '.join(allowed)}")
    return given


def array_words(w: dict) -> str:
    """Before a submitted array's first line: its tasks and their ids ("" for one workload)."""
    tasks, a = w.get("tasks"), w.get("array") or {}
    if not tasks:
        return ""
    cap = f", at most {a['limit']} at a time" if a.get("limit") else ""
    ids = tasks[0] if len(tasks) == 1 else f"{tasks[0]}..{tasks[-1]}"
    return f"array {a.get('id')}: {len(tasks)} task{'s' if len(tasks) != 1 else ''} ({ids}){cap}\n"


def cancel_hint(w: dict) -> str:
    return f"computehub cancel --array {w['id']}" if w.get("tasks") else f"computehub cancel {w['id']}"


def name_of(w: dict) -> str:
    """A workload's name, and for an array's task the array and its index: ``sweep w0000012[3]``
    (a row standing for several waiting tasks, ``collapse``: their indexes, ``[5-19]``)."""
    a = w.get("array")
    if not a:
        return w.get("name") or ""
    return f"{w.get('name') or ''} {a['id']}[{compact(w.get('waiting_indexes') or [a['index']])}]".strip()


def compact(indexes: list[int]) -> str:
    """``0-3,7,9-11``: runs of consecutive indexes as ranges."""
    out, start = [], None
    for i, x in enumerate(indexes):
        if start is None:
            start = x
        if i + 1 == len(indexes) or indexes[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(out)


def collapse(items: list[dict]) -> list[dict]:
    """Each job array's waiting tasks of one state as one row, as squeue shows pending array tasks:
    the first of them (its position, ETA and reason) with ``waiting_indexes`` and
    ``waiting_tasks`` (every one's index and id); the rest as they are, in order."""
    out, rows = [], {}
    for w in items:
        a = w.get("array")
        if not a or w["state"] not in WAITING:
            out.append(w)
            continue
        row = rows.get((a["id"], w["state"]))
        if row is None:
            row = rows[(a["id"], w["state"])] = dict(w, waiting_indexes=[], waiting_tasks=[])
            out.append(row)
        row["waiting_indexes"].append(a["index"])
        row["waiting_tasks"].append(w["id"])
    return out


def array_summary(tasks: list[dict]) -> str:
    """``10 tasks: 3 finished, 2 running, 5 pending`` (states in the order first met)."""
    counts: dict[str, int] = {}
    for w in tasks:
        counts[w["state"]] = counts.get(w["state"], 0) + 1
    return f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}: " + ", ".join(f"{n} {s}" for s, n in counts.items())


def task_resolver(tasks_of):
    """A function from an id to a workload's id: ``w50[3]`` (task 3 of job array w50) to that
    task's id, other ids as they are; LookupError for an index the array lacks.
    ``tasks_of(array_id)`` lists an array's tasks (once per array)."""
    known: dict[str, dict[int, str]] = {}

    def resolve(text: str) -> str:
        m = TASK.match(text.strip())
        if not m:
            return text
        array, index = f"w{int(m.group(1)):07d}", int(m.group(2))
        if array not in known:
            known[array] = {w["array"]["index"]: w["id"] for w in tasks_of(array) if w.get("array")}
        if index not in known[array]:
            raise LookupError(f"{text}: no task {index} of a job array {array} you may see")
        return known[array][index]
    return resolve


def every_task(ch):
    """``task_resolver`` over the service's listing (ended tasks too)."""
    return task_resolver(lambda array: ch.list(array=array, state=[*LIVE, *ENDED], limit=10_000)["workloads"])


def by_index(ch, act):
    """``act(id)`` that also takes ``w50[3]``; an index the array lacks is refused as the service
    refuses an unknown id (404, one line)."""
    resolve = every_task(ch)

    def acting(text: str):
        try:
            wid = resolve(text)
        except LookupError as e:
            raise ComputeHubError(404, "not_found", str(e)) from None
        return act(wid)
    return acting


def array_line(out: dict) -> str:
    """``array w0000050: cancelled 4 tasks (w0000050..w0000053): 1 cancelling, 3 cancelled``."""
    tasks, counts = out["tasks"], {}
    for state in out["states"].values():
        counts[state] = counts.get(state, 0) + 1
    ids = ", ".join(tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")
    if len(tasks) > 3 and int(tasks[-1][1:]) - int(tasks[0][1:]) == len(tasks) - 1:
        ids = f"{tasks[0]}..{tasks[-1]}"             # ids in a row
    n = f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}"
    now = ", ".join(f"{k} {s.replace('_', ' ')}" for s, k in counts.items())
    return f"array {out['array']}: {DONE[out['action']]} {n} ({ids}): {now}"
