"""``computehub run | infer | jobs | logs | checkpoint``: jobs the launcher runs, from a terminal
(and, ``checkpoint``, from inside a job).

What ``%submit`` / ``%serve`` do in a notebook: the command runs in this working
directory, with this identity, once the scheduler admits it (docs/launchers.md).
Everything after ``--`` is the command, passed as it is.
"""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import quote

from traitlets import Bool, Int, Unicode

from .cli import UsageError
from .cli_client import (ClientCommand, SubmitApp, gpus_of, human_duration, parse_when,
                         printable, table)
from .cli_client_arrays import LIVE, array_summary, array_words, cancel_hint, collapse, every_task, name_of
from .client import ComputeHubClient, ComputeHubError
from .log_follow import ended_line, follow

TERMINAL = ("finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")
ENV_PASSED = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH")


def job_metadata(command, **extra) -> dict:
    """``metadata.job`` for the launcher: the command, this folder and this PATH."""
    env = {k: os.environ[k] for k in ENV_PASSED if os.environ.get(k)}
    return {"job": {"command": command, "workdir": os.getcwd(), "env": env, **extra}}


class RunApp(SubmitApp):
    name = "computehub run"
    description = ("Run a command as a training (or --kind batch) job through the queue: "
                   "computehub run [options] -- COMMAND [ARGS...]. It runs in this folder as you, with "
                   "CUDA_VISIBLE_DEVICES for its GPUs, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT for --workers "
                   "and $COMPUTEHUB_CHECKPOINT_DIR for checkpoints a preempted job resumes from.")
    examples = """
computehub run --gpus 2 --time 2h -- python train.py --lr 0.1
computehub run --workers 2 --gpus 1 -- python ddp.py
computehub run --gpus 1 --after w0000042 -- python evaluate.py
computehub run --gpus 1 --array 0-19%4 -- python sweep.py --seed '$COMPUTEHUB_ARRAY_TASK_ID'
"""

    def run(self):
        if not self.extra_args:
            raise UsageError("computehub run needs a command after '--', e.g. computehub run -- python train.py")
        if self.kind in ("notebook", "inference"):
            raise UsageError(f"--kind {self.kind} is not a job; use training or batch (or 'computehub infer')")
        spec = self.spec()
        spec["metadata"] = job_metadata(list(self.extra_args))
        _, w = self.submit(spec)
        if self.json:
            return self.emit(w)
        held = f" ({w['reason']})" if w["state"] == "held" else ""
        print(f"{array_words(w)}{w['id']}  {w['state']}  queue {w['queue']}, {gpus_of(w)} GPU(s)"
              f"{' each' if w.get('tasks') else ''}{held}")
        print(f"follow it: computehub logs {w['id']} --follow   cancel it: {cancel_hint(w)}")

    def args(self):
        return []


class InferApp(SubmitApp):
    name = "computehub infer"
    description = ("Start an inference service through the queue: computehub infer [options] -- COMMAND. "
                   "COMMAND is a shell line serving HTTP on $PORT (or --port). Its URL, "
                   "<hub>/services/computehub/serve/<id>/, needs your hub login or token.")
    examples = """
computehub infer --gpus 1 --wait -- python -m http.server '$PORT'
computehub infer --gpus 1 --port 8080 --replicas 2 -- ./serve.sh
"""
    port = Int(0, help="The port COMMAND listens on (0: the launcher picks one and sets $PORT).").tag(config=True)
    replicas = Int(1, help="Copies of the service (count), each with --gpus GPUs.").tag(config=True)
    wait = Bool(False, help="Wait until it answers and print its URL.").tag(config=True)
    # An inference service's kind is inference and its copies are --replicas: no --kind, no --workers.
    aliases = {**{k: v for k, v in SubmitApp.aliases.items() if k not in ("kind", "workers")},
               "port": "InferApp.port", "replicas": "InferApp.replicas"}
    flags = {**SubmitApp.flags, "wait": ({"InferApp": {"wait": True}}, "Wait until it answers.")}

    def run(self):
        if not self.extra_args:
            raise UsageError("computehub infer needs a command after '--', e.g. "
                             "computehub infer -- python -m http.server '$PORT'")
        if self.replicas < 1:
            raise UsageError(f"--replicas must be 1 or more, not {self.replicas}")
        if self.port and not 1024 <= self.port <= 65535:
            raise UsageError(f"--port must be from 1024 to 65535, not {self.port}")
        self.kind, self.workers = "inference", self.replicas
        spec = self.spec()
        spec["metadata"] = job_metadata(" ".join(self.extra_args), **({"port": self.port} if self.port else {}))
        ch, w = self.submit(spec)
        url = f"{ch.url}/serve/{w['id']}/"
        if self.json:
            return self.emit(w)
        print(f"{w['id']}  {w['state']}  queue {w['queue']}; its URL once ready: {url}")
        while self.wait:
            w = ch.get(w["id"])
            if w["state"] in TERMINAL:
                raise ComputeHubError(None, "ended", f"{w['id']} ended ({w['state']}): {w.get('reason') or ''}")
            if ((w.get("metadata") or {}).get("status") or {}).get("ready"):
                print(f"{w['id']} is ready at {url}")
                return None
            time.sleep(1)

    def args(self):
        return []


JOB_KINDS = ["training", "batch", "inference"]


class JobsApp(ClientCommand):
    name = "computehub jobs"
    description = ("Your training, batch and inference jobs with state, queue position and reason "
                   "(--all: the latest ones of every state, ended ones too).")
    all = Bool(False, help="Include jobs that ended: the latest --limit of them.").tag(config=True)
    limit = Int(50, help="With --all: how many of your latest jobs to show (jobs).").tag(config=True)
    array = Unicode("", help="Only the tasks of this job array (its first task's id), ended ones too, "
                             "with a count of each state.").tag(config=True)
    flags = {**ClientCommand.flags, "all": ({"JobsApp": {"all": True}}, "Include jobs that ended.")}
    aliases = {**ClientCommand.aliases, "limit": "JobsApp.limit", "array": "JobsApp.array"}

    def run(self):
        if not 1 <= self.limit <= 10_000:
            raise UsageError(f"--limit must be 1 to 10000 jobs, not {self.limit}")
        ch = self.client()
        me = ch.me()["name"]
        if self.array:
            answer = ch.list(array=self.array, state=[*LIVE, *TERMINAL], limit=10_000, explain=True)
            items, total = answer["workloads"], answer["total"]
            if not items:
                raise UsageError(f"{self.array} names no job array you may see")
        elif self.all:
            # The latest first from the service (a year of history is never read whole),
            # shown oldest to newest so the newest end up next to the prompt.
            answer = ch.list(user=me, state=["held", "pending", "awaiting_approval", "admitted", "running",
                                             "preempting", "cancelling", "reclaiming", *TERMINAL],
                             kind=JOB_KINDS, order="newest", limit=self.limit, explain=True)
            items, total = answer["workloads"][::-1], answer["total"]
        else:
            answer = ch.list(user=me, kind=JOB_KINDS, limit=10_000, explain=True)
            items, total = answer["workloads"], answer["total"]
        if not (self.json or self.array):       # a job array's waiting tasks: one row (squeue's way)
            items = collapse(items)
        if self.json:
            return self.emit(items)
        if not items:
            return print("no jobs" + ("" if self.all else " running or waiting (--all: ended ones too)"))
        rows = [[w["id"], name_of(w), w["kind"], gpus_of(w), w["state"],
                 f"{w['position_in_queue']} in {w['queue']}" if w.get("position_in_queue") else "",
                 ((w.get("explanation") or {}).get("reason") or w.get("reason") or "").split("\n")[0][:100]]
                for w in items]
        print(table(rows, ["ID", "NAME", "KIND", "GPUS", "STATE", "POS", "REASON"]))
        if self.array:
            print(f"array {self.array}: {array_summary(items)}")
        elif self.all and total > self.limit:
            print(f"(your latest {self.limit} of {total}; --limit N for more)")


class LogsApp(ClientCommand):
    name = "computehub logs"
    description = ("computehub logs ID [--follow] [--tail N]: a job's output (what the launcher recorded); "
                   "ID may name a job array's task by its index, w0000050[7].")
    positional, usage_args = 1, "a workload id"
    follow = Bool(False, help="Keep printing new lines until the job ends.").tag(config=True)
    raw = Bool(False, help="Print the output as it is, control characters (colours, cursor moves) "
                           "included; by default they are shown as escapes like \\x1b.").tag(config=True)
    tail = Int(200, help="How many last lines to show first (lines).").tag(config=True)
    aliases = {**ClientCommand.aliases, "tail": "LogsApp.tail"}
    flags = {"follow": ({"LogsApp": {"follow": True}}, "Keep printing new lines until the job ends."),
             "f": ({"LogsApp": {"follow": True}}, "Same as --follow."),
             "raw": ({"LogsApp": {"raw": True}}, "Control characters as they are (colours and all).")}

    def run(self, wid):
        if not 1 <= self.tail <= 100_000:
            raise UsageError(f"--tail must be from 1 to 100000, not {self.tail}")
        ch = self.client()
        try:
            wid = every_task(ch)(wid)          # w50[3]: task 3 of job array w50
        except LookupError as e:
            raise UsageError(str(e)) from None
        path = f"workloads/{quote(wid, safe='')}/logs"
        show = (lambda line: line) if self.raw else printable

        def fetch(params: dict) -> dict | None:
            try:
                return ch.request("GET", path, params=params)
            except ComputeHubError as e:
                if e.status == 404 and "no logs" in e.message:
                    return None
                raise

        def no_output():
            print(f"{wid}: no output yet", file=sys.stderr)

        if not self.follow:
            lines = (fetch({"tail": self.tail}) or {}).get("lines")
            print("\n".join(map(show, lines))) if lines else no_output()
            return None
        w = follow(fetch, lambda: ch.get(wid), tail=self.tail, terminal=TERMINAL,
                   emit=lambda line: print(show(line), flush=True), on_empty=no_output)
        print(show(ended_line(w)), file=sys.stderr)
        return None


class CheckpointApp(ClientCommand):
    name = "computehub checkpoint"
    description = ("computehub checkpoint [ID] [--at WHEN] [--on-stop]: a running job says it saved a "
                   "checkpoint, so preemption knows it would lose only the work since. Inside a job the "
                   "launcher started, ID, URL and token come from the job's environment "
                   "($COMPUTEHUB_WORKLOAD_ID, $COMPUTEHUB_URL, $COMPUTEHUB_REPORT_TOKEN).")
    examples = """
python train.py --save-to $COMPUTEHUB_CHECKPOINT_DIR/step-500.pt && computehub checkpoint
computehub checkpoint --on-stop          # in a SIGTERM handler, after the last save
computehub checkpoint w0000042 --at 10m  # its owner, for a save ten minutes ago
"""
    at = Unicode("", help="When it saved: a duration ago (10m) or a date (2025-01-31T12:00); "
                          "default now.").tag(config=True)
    on_stop = Bool(False, help="The save was made because the job was told to stop (preempted): "
                               "from then on its preemptions lose only the restart.").tag(config=True)
    aliases = {**ClientCommand.aliases, "at": "CheckpointApp.at"}
    flags = {**ClientCommand.flags,
             "on-stop": ({"CheckpointApp": {"on_stop": True}}, "The save was made because the job was told "
                                                                 "to stop (preempted).")}

    def args(self):
        args = list(self.extra_args)
        if len(args) > 1:
            raise UsageError(f"unexpected argument {args[1]!r} (see '{self.name} --help')")
        wid = args[0] if args else os.environ.get("COMPUTEHUB_WORKLOAD_ID", "")
        if not wid:
            raise UsageError("computehub checkpoint needs a workload id (outside a job, where "
                             "$COMPUTEHUB_WORKLOAD_ID is not set)")
        return [wid]

    def client(self):
        token = self.token or os.environ.get("COMPUTEHUB_REPORT_TOKEN") or None
        return ComputeHubClient(self.url or None, token)

    def run(self, wid):
        if self.at:
            parse_when(self.at, "--at", time.time())         # a mistake is said before asking anyone
        ch = self.client()
        at = parse_when(self.at, "--at", ch.now()) if self.at else None      # on the service's clock
        w = ch.report_checkpoint(wid, at=at, on_stop=self.on_stop)
        if self.json:
            return self.emit(w)
        print(f"{w['id']}  {w['state']}  checkpoint saved {human_duration(ch.now() - w['checkpointed_at'])} ago"
              + ("; it saves when stopped" if w.get("saves_on_stop") else ""))
