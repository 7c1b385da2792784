"""How the command line shows job arrays, and ``--array``: acting on every task of one."""

from __future__ import annotations

from .cli import UsageError

LIVE = ("held", "pending", "awaiting_approval", "admitted", "running", "preempting", "cancelling", "reclaiming")
ARRAY_FLAG = "The ids name job arrays (the id of an array's first task): act on each of its tasks."


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
    """A workload's name, and for an array's task the array and its index: ``sweep w0000012[3]``."""
    a = w.get("array")
    return f"{w.get('name') or ''} {a['id']}[{a['index']}]".strip() if a else (w.get("name") or "")


def task_ids(ch, arrays, states=LIVE) -> list[str]:
    """The tasks in ``states`` of each named array, in index order. An id that names no array the
    caller may see (or one whose tasks have all left those states) is a usage error."""
    out = []
    for array in arrays:
        found = [w["id"] for w in ch.list(array=array, state=list(states), limit=10_000)["workloads"]]
        if not found:
            raise UsageError(f"{array} names no job array you may see with tasks that are "
                             f"{' or '.join(states) if len(states) < 3 else 'still live'}")
        out += found
    return out


def array_summary(tasks: list[dict]) -> str:
    """``10 tasks: 3 finished, 2 running, 5 pending`` (states in the order first met)."""
    counts: dict[str, int] = {}
    for w in tasks:
        counts[w["state"]] = counts.get(w["state"], 0) + 1
    return f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
