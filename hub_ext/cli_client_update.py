"""``computehub update``: change waiting work (Slurm's ``scontrol update JobId=…``)."""

from __future__ import annotations

import json

from traitlets import Bool, Unicode

from .cli import UsageError
from .cli_client import ClientCommand, gpus_of, human_duration, parse_duration
from .cli_client_arrays import WAITING, by_index, states_of
from .cli_each import for_each_id, printable

NONE = ("none", "any", "")
OPTIONS = ("gpus", "cpu", "memory", "workers", "gpu-model", "time", "checkpoint-every", "queue", "priority", "name")
TEST_ONLY = ("Change nothing: say where it would stand with the change (place in line, start estimate) "
             "beside where it stands now (Slurm's sbatch --test-only).")
WHOLE_ARRAY = ("The ids name job arrays (the id of an array's first task, or any task's): change every task of "
               "it still waiting, in one go (its running tasks go on as they are).")
WAITING_STATE = ("With --array: change only its tasks now in these states, commas between them: held, pending "
                 "or awaiting_approval (e.g. 'held': a panel row's).")


class UpdateApp(ClientCommand):
    name = "computehub update"
    description = ("computehub update ID [ID ...] OPTIONS: change waiting workloads (Slurm's scontrol update): "
                   "GPUs, CPU, memory, workers, GPU model, time limit, checkpoints, queue, priority class or "
                   "name, each checked as at submission. Asking for less or a shorter limit keeps the place in "
                   "line; more, or another queue or class, waits from now. Running work changes only its "
                   "name, --checkpoint-every and a shorter --time; only an admin gives more time.")
    examples = """
computehub update w0000042 --gpus 2 --memory 32Gi     # asked for too much: keeps its place
computehub update w0000042 --time 30m                 # a shorter limit may start sooner (backfill)
computehub update w0000042 --gpus 2 --test-only       # when would it start with 2? nothing changes
computehub update --array w0000050 --memory 16Gi      # every waiting task of the array
computehub update --array w0000050 --state held --time 2h   # only its held tasks
computehub update w0000042 --queue vision --priority preemptible
"""
    positional, usage_args = -1, "one or more workload ids"
    gpus = Unicode("", help="GPUs per worker (count).").tag(config=True)
    cpu = Unicode("", help="CPU per worker: cores ('8', '0.5') or millicores ('500m'); 0 for none.").tag(
        config=True)
    memory = Unicode("", help="Memory per worker, e.g. 64Gi, 512Mi (bytes if no unit); 0 for none.").tag(
        config=True)
    workers = Unicode("", help="Workers (count); more than 1 makes a gang started all at once.").tag(config=True)
    gpu_model = Unicode("", help="GPU model, e.g. a100; 'any' for none in particular.").tag(config=True)
    time_limit = Unicode("", help="Run-time limit: seconds or 90m, 2h, 1d; 'none' for no limit (admins: "
                                  "more time than now only by an admin).").tag(config=True)
    checkpoint_every = Unicode("", help="How often the job saves a checkpoint (seconds or 30m, 1h); 'none' "
                                        "for its priority class's.").tag(config=True)
    queue = Unicode("", help="Move it to this queue (its wait counts from now).").tag(config=True)
    priority = Unicode("", help="Move it to this priority class (its wait counts from now).").tag(config=True)
    workload_name = Unicode("", help="A new name (text).").tag(config=True)
    array = Bool(False, help=WHOLE_ARRAY).tag(config=True)
    state = Unicode("", help=WAITING_STATE).tag(config=True)
    test_only = Bool(False, help=TEST_ONLY).tag(config=True)
    aliases = {**ClientCommand.aliases, "gpus": "UpdateApp.gpus", "cpu": "UpdateApp.cpu",
               "memory": "UpdateApp.memory", "workers": "UpdateApp.workers", "gpu-model": "UpdateApp.gpu_model",
               "time": "UpdateApp.time_limit", "checkpoint-every": "UpdateApp.checkpoint_every",
               "queue": "UpdateApp.queue", "priority": "UpdateApp.priority", "name": "UpdateApp.workload_name",
               "state": "UpdateApp.state"}
    flags = {**ClientCommand.flags, "array": ({"UpdateApp": {"array": True}}, WHOLE_ARRAY),
             "test-only": ({"UpdateApp": {"test_only": True}}, TEST_ONLY)}

    def changes(self) -> dict:
        return changes_from({"gpus": self.gpus, "cpu": self.cpu, "memory": self.memory, "workers": self.workers,
                             "gpu-model": self.gpu_model, "time": self.time_limit,
                             "checkpoint-every": self.checkpoint_every, "queue": self.queue,
                             "priority": self.priority, "name": self.workload_name})

    def run(self, *ids):
        changes, states = self.changes(), states_of(self.state, self.array, WAITING)
        if self.test_only and self.array:
            raise UsageError("--test-only tries the change on one workload: name a task instead of --array")
        ch = self.client()

        def act(wid):
            return ch.update(wid, whole_array=self.array, dry_run=self.test_only, states=states, **changes)

        def line(w):
            return json.dumps(w) if self.json else result_line(w)     # JSON: one object a line, one an id

        return for_each_id(ids, by_index(ch, act) if not self.array else act, line)


def changes_from(given: dict) -> dict:
    """The change (``PATCH workloads/{id}``'s body) that options ask for, each given as the text typed
    (keys as the options are named: ``gpus``, ``gpu-model``, ``time``, ``checkpoint-every``, ...;
    "" or None: not given). UsageError says what is wrong. Shared by ``computehub update`` and
    ``%update``."""
    given = {k: (given.get(k) or "").strip() for k in OPTIONS}
    out: dict = {}
    resources = {k: _count("--gpus", given[o]) if k == "gpu" else given[o]
                 for k, o in (("gpu", "gpus"), ("cpu", "cpu"), ("memory", "memory")) if given.get(o)}
    if resources:
        out["resources"] = resources
    if given.get("workers"):
        out["workers"] = _count("--workers", given["workers"])
    if given.get("gpu-model"):
        out["gpu_model"] = None if given["gpu-model"].lower() in NONE else given["gpu-model"]
    for key, option in (("time_limit", "time"), ("checkpoint_every", "checkpoint-every")):
        if given.get(option):
            value = given[option]
            out[key] = None if value.lower() in NONE else parse_duration(value, f"--{option}")
    for key in ("queue", "priority", "name"):
        if given.get(key):
            out[key] = given[key]
    if not out:
        raise UsageError("say what to change: --gpus, --cpu, --memory, --workers, --gpu-model, --time, "
                         "--checkpoint-every, --queue, --priority or --name")
    return out


def result_line(w: dict) -> str:
    """What a change made (or, tried, would make) of a workload, in one line."""
    limit = "no limit" if w.get("time_limit") is None else f"limit {w['time_limit']:g} s"
    if w.get("dry_run"):
        return (f"{w['id']}  with the change: queue {w['queue']}, {gpus_of(w)}, {limit}; "
                f"{standing(w['explanation'])} (now: {standing(w['explanation_before'])}); nothing changed")
    n = len(w.get("tasks") or ())
    tasks = f" ({n} waiting task{'s' if n != 1 else ''} of array {w['array']['id']})" if n else ""
    reason = f"  ({printable(w['reason'])})" if w.get("reason") else ""
    return f"{w['id']}  {w['state']}  queue {w['queue']}, {gpus_of(w)}, {limit}{tasks}{reason}"


def standing(e: dict) -> str:
    """``#2 in line, starts in 2h10m`` (``if released now`` for work held by hand; ``starts in 3h
    once what it runs after ends`` for work that runs after other work), or why there is no place
    or start to tell."""
    if "position" not in e:
        if e.get("eta_seconds") is not None:
            return f"{_start(e)} once what it runs after ends"
        return printable(e.get("eta_reason") or e.get("reason") or e.get("state", ""))
    released = " if released now" if str(e.get("eta_reason", "")).endswith("(if released now)") else ""
    return f"#{e['position']} in line, {_start(e)}{released}"


def _start(e: dict) -> str:
    if e.get("eta_seconds") is None:
        return f"start unknown ({printable(e.get('eta_reason', ''))})"
    if e["eta_seconds"] < 1:
        return "starts now"
    return f"starts in {'≥ ' if e.get('eta_earliest') else ''}{human_duration(e['eta_seconds'])}"


def _count(option: str, value: str) -> int:
    if not value.strip().isdigit():
        raise UsageError(f"{option} is a whole number, not {value!r}")
    return int(value)
