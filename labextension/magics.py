"""``%submit``, ``%%submit``, ``%jobs``, ``%logs``, ``%cancel``, ``%hold``, ``%release``, ``%top``,
``%update`` and ``%serve``: ComputeHub from a notebook.

``%load_ext labextension`` loads them (the wheel's IPython kernel config does it
for every kernel, see docs/magics.md). ``%submit`` returns at once with a
handle and shows a live display (display.py). Every mistake — a bad option, a
missing service or scope, an unknown queue — is one line, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from hub_ext.cli import UsageError as CommandLineMistake
from hub_ext.cli_client_arrays import WAITING, array_id, array_line, collapse, name_of, task_resolver
from hub_ext.cli_client_update import WAITING_STATE, changes_from, result_line
from hub_ext.cli_time import parse_begin
from hub_ext.log_follow import ended_line, follow

from . import jobs as J
from .display import POLL, ArrayFollower, Follower, bundle, describe, describe_array
from .job_arrays import JobArray, act_on_array
from .magic_args import STATE, UNTIL, on_ids, picked_states, submitting, until_time

@magics_class
class ComputeHubMagics(Magics):
    def __init__(self, shell=None):
        super().__init__(shell)
        self.followers: dict[str, Follower] = {}

    def client(self) -> J.Client:
        # Not cached: the environment ($COMPUTEHUB_URL, the token) may change between cells.
        return J.Client()

    def _fail(self, e: Exception) -> None:
        print(f"computehub: {e}", file=sys.stderr)

    def _parse(self, fn, line: str):
        try:
            args = parse_argstring(fn, line)
        except UsageError as e:
            raise UsageError(f"{e} (see %{fn.__name__} --help)") from None
        if getattr(args, "help", False):
            print(fn.parser.format_help())
            return None
        return args

    def _options(self, args) -> dict:
        if args.gpus < 0:
            raise UsageError(f"--gpus must be 0 or more, not {args.gpus}")
        opts = dict(gpus=args.gpus, gpu_model=args.gpu_model, cpu=args.cpu, memory=args.memory,
                    queue=args.queue, priority=args.priority, name=args.name, after=args.after,
                    hold=args.hold, mail=args.mail)
        for given, key, what in ((args.time, "time_limit", "--time"),
                                 (args.checkpoint_every, "checkpoint_every", "--checkpoint-every")):
            if given is not None:
                try:
                    opts[key] = J.parse_duration(given, what)
                except J.JobError as e:
                    raise UsageError(str(e)) from None
        if args.begin is not None:
            try:
                opts["begin"] = parse_begin(args.begin, time.time())
            except CommandLineMistake as e:
                raise UsageError(str(e)) from None
        return opts

    def _launch(self, spec: dict) -> J.Job | JobArray | None:
        try:
            job = self.client().submit_spec(spec)
        except J.JobError as e:
            self._fail(e)
            return None
        if isinstance(job, JobArray):       # one display for all its tasks
            first = job.last
            handle = display(bundle(*describe_array(first, [dict(first, id=t.id) for t in job])), raw=True,
                             display_id=True)
            follower = ArrayFollower(job, handle.display_id)
        else:
            handle = display(bundle(*describe(job.last)), raw=True, display_id=True)
            follower = Follower(job, handle.display_id)
        self.followers[job.id] = follower
        follower.start()
        return job

    @magic_arguments()
    @submitting
    @argument("--workers", type=int, default=1, help="Workers (processes), each with --gpus GPUs; more than 1 "
                                                      "is a gang started all at once with RANK, WORLD_SIZE, "
                                                      "MASTER_ADDR and MASTER_PORT set (torchrun-style).")
    @argument("--array", default=None, help="A job array: one task per index, e.g. 0-9 or 1,3,5-11:2; %%N runs "
                                            "at most N at a time (0-99%%10). Each task gets "
                                            "$COMPUTEHUB_ARRAY_TASK_ID; the handle is a list of the tasks.")
    @argument("script", nargs="?", help="The script to run (.py runs with this kernel's Python); "
                                        "with %%%%submit the cell is the script.")
    @argument("args", nargs=argparse.REMAINDER, help="Arguments for the script.")
    @line_cell_magic
    def submit(self, line, cell=None):
        """Run a script (or, as %%submit, the cell) as a training job through the ComputeHub queue.

        It runs with the same files (this working directory) and identity as the notebook, gets
        CUDA_VISIBLE_DEVICES for its GPUs and $COMPUTEHUB_CHECKPOINT_DIR (save checkpoints there: a
        preempted job is requeued and resumes from them). Returns a handle at once; the display
        follows the job. Examples:

          %submit --gpus 2 --time 2h train.py --lr 0.1
          %submit --workers 2 --gpus 1 ddp.py
          %submit --gpus 1 --after {prep.id} evaluate.py
          sweep = %submit --gpus 1 --array 0-19%4 sweep.py
          %%submit --gpus 1 --name sweep
          print("hello from a job")
        """
        args = self._parse(self.submit, line)
        if args is None:
            return None
        opts = self._options(args)
        if args.workers < 1:
            raise UsageError(f"--workers must be 1 or more, not {args.workers}")
        if cell is not None:
            positional = ([args.script] if args.script else []) + list(args.args)
            command, script = [sys.executable, "-u", "{script}", *positional], cell
        else:
            if not args.script:
                raise UsageError("%submit needs a script, e.g. %submit train.py (or use %%submit with a cell)")
            if args.script.startswith("-"):
                raise UsageError(f"unknown option {args.script} (see %submit --help)")
            if not os.path.isfile(args.script):
                raise UsageError(f"no such file: {args.script} (in {os.getcwd()})")
            command, script = J.script_command(args.script, args.args), None
        try:
            spec = J.job_spec(command, script=script, workers=args.workers, array=args.array, **opts)
        except J.JobError as e:
            raise UsageError(str(e)) from None
        return self._launch(spec)

    @magic_arguments()
    @submitting
    @argument("--port", type=int, default=None, help="The port COMMAND listens on (default: the launcher "
                                                     "picks one and sets $PORT).")
    @argument("--replicas", type=int, default=1, help="Copies of the service (each with --gpus GPUs).")
    @argument("command", nargs=argparse.REMAINDER, help="A shell line that serves HTTP on $PORT.")
    @line_magic
    def serve(self, line):
        """Start an inference service through the ComputeHub queue and print its URL when it answers.

        The URL goes through the hub's proxy and needs hub authentication (your login or a token):
        <hub>/services/computehub/serve/<id>/. A crashed service is restarted (up to a limit). Example:

          %serve --gpus 1 python -m http.server $PORT
        """
        args = self._parse(self.serve, line)
        if args is None:
            return None
        opts = self._options(args)
        command = " ".join(args.command).strip()
        if not command:
            raise UsageError("%serve needs a command, e.g. %serve python -m http.server $PORT")
        if command.startswith("-"):
            raise UsageError(f"unknown option {command.split()[0]} (see %serve --help)")
        if args.replicas < 1:
            raise UsageError(f"--replicas must be 1 or more, not {args.replicas}")
        try:
            spec = J.job_spec(command, kind="inference", workers=args.replicas, port=args.port, **opts)
        except J.JobError as e:
            raise UsageError(str(e)) from None
        job = self._launch(spec)
        if job is not None:
            threading.Thread(target=self._announce, args=(job,), daemon=True).start()
        return job

    def _announce(self, job: J.Job) -> None:
        try:
            url = job.wait_ready(every=POLL)
        except J.JobError as e:
            print(f"computehub: {e}", file=sys.stderr)
            return
        print(f"{job.id} is ready at {url} (hub login or 'Authorization: token ...' required)")

    @magic_arguments()
    @argument("-h", "--help", action="store_true", help="Show this help.")
    @argument("--all", action="store_true", help="Include jobs that ended: your latest --limit jobs.")
    @argument("--limit", type=int, default=50, help="With --all: how many of your latest jobs (default 50).")
    @line_magic
    def jobs(self, line):
        """Your jobs with state, queue position and reason: %jobs [--all [--limit N]]."""
        args = self._parse(self.jobs, line)
        if args is None:
            return None
        if not 1 <= args.limit <= 10_000:
            raise UsageError(f"--limit must be 1 to 10000 jobs, not {args.limit} (see %jobs --help)")
        try:
            items = self.client().jobs(include_ended=args.all, limit=args.limit)
        except J.JobError as e:
            return self._fail(e)
        if not items:
            print("no jobs" + ("" if args.all else " running or waiting (%jobs --all includes ended ones)"))
            return None
        rows = [("ID", "NAME", "KIND", "STATE", "POS", "REASON")]
        for w in collapse(items):           # a job array's waiting tasks: one row
            pos = f"{w['position_in_queue']} in {w['queue']}" if w.get("position_in_queue") else ""
            reason = (w.get("explanation") or {}).get("reason") or w.get("reason") or ""
            rows.append((w["id"], name_of(w) or "-", w["kind"], w["state"], pos or "-",
                         reason.splitlines()[0][:100] if reason else ""))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        print("\n".join("  ".join(c.ljust(n) for c, n in zip(r[:5], widths)) + "  " + r[5] for r in rows))
        if args.all and len(items) == args.limit:
            print(f"(your latest {args.limit}; %jobs --all --limit N for more)")
        return None

    @magic_arguments()
    @argument("-h", "--help", action="store_true", help="Show this help.")
    @argument("--follow", "-f", action="store_true", help="Keep printing new lines until the job ends.")
    @argument("--tail", type=int, default=200, help="How many last lines to show first.")
    @argument("id", nargs="?", help="The job's id, e.g. w0000042.")
    @line_magic
    def logs(self, line):
        """A job's output: %logs ID [--follow] [--tail N]."""
        args = self._parse(self.logs, line)
        if args is None:
            return None
        if not args.id:
            raise UsageError("%logs needs a job id, e.g. %logs w0000042 (%jobs lists yours)")
        if not 1 <= args.tail <= 100_000:
            raise UsageError(f"--tail must be from 1 to 100000, not {args.tail}")
        try:
            client = self.client()
            args.id = task_resolver(client.array_tasks)(args.id)      # w50[3]: task 3 of job array w50
            if not args.follow:
                lines = client.logs(args.id, args.tail)
                print("\n".join(lines)) if lines else print(f"{args.id}: no output yet")
                return None
            w = follow(lambda params: client.log_piece(args.id, params), lambda: client.job(args.id).last,
                       tail=args.tail, terminal=J.TERMINAL, emit=print,
                       on_empty=lambda: print(f"{args.id}: no output yet"), poll=POLL)
            print(ended_line(w))
            return None
        except (J.JobError, LookupError) as e:
            return self._fail(e)
        except KeyboardInterrupt:
            return None

    def _each(self, fn, line: str, act, last_first: bool = False) -> None:
        """``act(args, id)`` for each id on the line, printing what it says (``--array``: the same
        action on each task of the arrays they name, one request each); a refusal is one line.
        ``last_first``: act on the ids (or arrays) from the last named, saying what each did in
        the order named (%top: the last put first goes first)."""
        args = self._parse(fn, line)
        if args is None:
            return
        if not args.ids:
            raise UsageError(f"%{fn.__name__} needs one or more job ids, e.g. %{fn.__name__} w0000042")
        states, args.until = picked_states(args), until_time(args)
        if last_first:
            args.ids.reverse()
        if args.array:
            for array in args.ids:
                try:
                    out = act_on_array(self.client(), array_id(array), fn.__name__, getattr(args, "reason", ""),
                                       states, args.until)
                except J.JobError as e:
                    self._fail(e)
                    continue
                print(array_line(out))
                for wid, why in out["refused"].items():
                    self._fail(f"{wid} left as it was: {why}")
            return
        resolve = task_resolver(lambda array: self.client().array_tasks(array))     # w50[3]: its task 3
        said = []
        for wid in args.ids:
            try:
                text = act(args, resolve(wid))
            except (J.JobError, LookupError) as e:
                self._fail(e)
                continue
            if last_first:
                said.append(text)
            else:
                print(text)
        for text in reversed(said):         # (last_first: said in the order named)
            print(text)

    @on_ids(STATE)
    @line_magic
    def cancel(self, line):
        """Cancel jobs: waiting ones leave the queue, running ones are stopped (SIGTERM, then kill)."""
        def act(args, wid):
            w = self.client().cancel(wid)
            then = " (it is being stopped; its GPUs return once it has)" if w["state"] == "cancelling" else ""
            return f"{w['id']}: {w['state']}{then}"
        self._each(self.cancel, line, act)

    @on_ids(argument("--reason", default="", help="Why it is held (shown with it)."), UNTIL)
    @line_magic
    def hold(self, line):
        """Keep waiting jobs from starting until %release (or --until a time); they keep their ids."""
        def act(args, wid):
            w = self.client().hold(wid, args.reason, args.until)
            return f"{w['id']}: {w['state']} ({w['reason']})"
        self._each(self.hold, line, act)

    @on_ids()
    @line_magic
    def top(self, line):
        """Put waiting jobs first among my own of their queue and class, the first named first
        (--array: an array's waiting tasks, in index order); nobody else's place moves."""
        def act(args, wid):
            w = self.client().top(wid)
            return f"{w['id']}: {w['state']} (first among your {w['priority']} work in queue {w['queue']})"
        self._each(self.top, line, act, last_first=True)

    @on_ids()
    @line_magic
    def release(self, line):
        """Let held jobs join the queue (their wait counts from now)."""
        def act(args, wid):
            w = self.client().release(wid)
            return f"{w['id']}: {w['state']}" + (f" ({w['reason']})" if w.get("reason") else "")
        self._each(self.release, line, act)

    @on_ids(*(argument(f"--{o}", default=None, help=h) for o, h in (
        ("gpus", "GPUs per worker."), ("cpu", "CPU per worker ('8', '500m'; 0: none)."),
        ("memory", "Memory per worker ('64Gi'; 0: none)."), ("workers", "Workers (a gang if more than 1)."),
        ("gpu-model", "GPU model ('any': none in particular)."),
        ("time", "Run-time limit (90m, 2h; more time only from an admin)."),
        ("checkpoint-every", "How often it saves a checkpoint (30m, 1h)."), ("queue", "Another queue."),
        ("priority", "Another priority class."), ("name", "A new name."))),
        argument("--test-only", action="store_true", help="Change nothing: say where it would stand and "
                                                          "when it would start with the change."),
        argument("--state", default="", help=WAITING_STATE))
    @line_magic
    def update(self, line):
        """Change waiting jobs: GPUs, memory, time limit, queue, class or name (docs/cli.md, "update")."""
        args = self._parse(self.update, line)
        if args is None:
            return
        if not args.ids:
            raise UsageError("%update needs one or more job ids, e.g. %update w0000042 --gpus 2")
        try:
            changes = changes_from({k.replace("_", "-"): v for k, v in vars(args).items() if isinstance(v, str)})
        except CommandLineMistake as e:
            raise UsageError(str(e)) from None
        if args.test_only and args.array:
            raise UsageError("--test-only tries the change on one job: name a task instead of --array")
        states = picked_states(args, WAITING)
        resolve = (lambda a: array_id(a)) if args.array else \
            task_resolver(lambda array: self.client().array_tasks(array))
        for wid in args.ids:
            try:
                print(result_line(self.client().update(resolve(wid), changes, args.array, args.test_only, states)))
            except (J.JobError, LookupError) as e:
                self._fail(e)


def load_ipython_extension(ipython):
    ipython.register_magics(ComputeHubMagics)
