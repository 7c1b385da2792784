"""``computehub submit | queue | cancel | usage``: the REST API from a terminal.

Each command talks to the service through ``hub_ext.client`` with a JupyterHub
API token (``--url``/``--token`` or the environment, see docs/cli.md). A server
error is one line, ``computehub: error: <the server's message>``: exit code 2
for the caller's mistakes (4xx, no token), 1 when the service fails or cannot
be reached. The admin commands (quota, nodes, approvals) are in cli_client_admin.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

from traitlets import Bool, Enum, Int, Unicode

from scheduler.ledger import OWNED

from .cli import Command, UsageError
from .cli_client_arrays import (ARRAY_FLAG, STATE_FLAG, array_words, by_index, cancel_hint, collapse, name_of,
                                states_of)
from .cli_each import act_on_arrays, for_each_id, printable, report  # noqa: F401 (printable: for the others)
from .cli_time import human_duration, parse_begin, parse_duration, parse_when  # noqa: F401 (for the others)
from .client import ComputeHubClient, ComputeHubError

KINDS = ("training", "batch", "inference", "notebook")
CONNECTION_HELP = ("URL of the ComputeHub service, e.g. https://hub.example.org/services/computehub "
                   "(default: $COMPUTEHUB_URL, else the hub's URL from $JUPYTERHUB_PUBLIC_HUB_URL or "
                   "$JUPYTERHUB_URL + /services/computehub).")


def gpus_of(w: dict) -> str:
    g = (w.get("resources") or {}).get("gpu", 0) or 0
    model = f" {w['gpu_model']}" if w.get("gpu_model") else ""
    return f"{w.get('workers', 1)}×{g}{model}" if w.get("workers", 1) > 1 else f"{g}{model}"


def table(rows: list[list], header: list[str]) -> str:
    """An aligned text table; the last column is left unpadded (it may be long). Cells are
    ``printable``: a name or reason cannot drive the terminal or break the rows."""
    cells = [[str(c) for c in header]] + [["-" if c is None or c == "" else printable(c, keep_tabs=False)
                                           for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in cells).rstrip()


class ClientCommand(Command):
    """A command that calls the service: --url, --token, --json; server errors in one line."""

    url = Unicode("", help=CONNECTION_HELP).tag(config=True)
    token = Unicode("", help="JupyterHub API token (default: $COMPUTEHUB_TOKEN, else $JUPYTERHUB_API_TOKEN; "
                    "make one on the hub's token page, <hub>/hub/token).").tag(config=True)
    json = Bool(False, help="Print the service's JSON instead of a table.").tag(config=True)

    aliases = {"url": "ClientCommand.url", "token": "ClientCommand.token"}
    flags = {"json": ({"ClientCommand": {"json": True}}, "Print the service's JSON instead of a table.")}
    positional = 0            # how many positional arguments the command takes (-1: one or more)
    usage_args = ""

    def client(self) -> ComputeHubClient:
        return ComputeHubClient(self.url or None, self.token or None)

    def args(self) -> list[str]:
        n, args = self.positional, list(self.extra_args)
        if (n == -1 and not args) or (n > 0 and len(args) < n):
            raise UsageError(f"{self.name} needs {self.usage_args} (see '{self.name} --help')")
        if n >= 0 and len(args) > n:
            raise UsageError(f"unexpected argument {args[n]!r} (see '{self.name} --help')")
        return args

    def start(self):
        if self.subapp is not None:
            return self.subapp.start()
        try:
            return self.run(*self.args()) or 0
        except ComputeHubError as e:
            return report(e)

    def emit(self, data) -> None:
        print(json.dumps(data, indent=2, sort_keys=False))


class SubmitApp(ClientCommand):
    name = "computehub submit"
    description = ("Submit a workload to the scheduler and print its id and state. It waits in its "
                   "queue until quota and GPUs allow; 'computehub queue' shows its position, ETA and "
                   "the reason it waits. Declaring --time lets it start early in gaps (backfill) and "
                   "gives it an ETA.")
    examples = """
computehub submit --gpus 2 --time 4h --name resnet
computehub submit --gpus 4 --workers 2 --gpu-model a100 --queue vision --time 1d
computehub submit --kind batch --gpus 1 --cpu 8 --memory 64Gi --time 90m
computehub submit --gpus 1 --after w0000042,w0000043:any
computehub submit --gpus 1 --array 0-99%10 --name sweep
computehub submit --gpus 8 --time 2d --mail end,fail
"""
    gpus = Int(1, help="GPUs per worker (count).").tag(config=True)
    gpu_model = Unicode("", help="GPU model, e.g. a100 (default: any).").tag(config=True)
    workers = Int(1, help="Workers (count); more than 1 makes a gang started all at once.").tag(config=True)
    cpu = Unicode("", help="CPU per worker: cores ('8', '0.5') or millicores ('500m').").tag(config=True)
    memory = Unicode("", help="Memory per worker, e.g. 64Gi, 512Mi (bytes if no unit).").tag(config=True)
    queue = Unicode("", help="Queue to submit to (default: the first one open to your groups).").tag(config=True)
    priority = Unicode("", help="Priority class (default from --kind: training, preemptible, inference, "
                       "interactive).").tag(config=True)
    time_limit = Unicode("", help="Run-time limit: seconds or 90m, 2h, 1d, 1h30m.").tag(config=True)
    checkpoint_every = Unicode("", help=(
        "How often the job saves a checkpoint (seconds or 30m, 1h): it is then swapped out for "
        "shorter work only just after one (default: its priority class's).")).tag(config=True)
    workload_name = Unicode("", help="A name for the workload (text).").tag(config=True)
    after = Unicode("", help=(
        "Run after these workloads of yours: ids separated by commas, each with :ok (the default: it "
        "finished), :any (it ended) or :failed (it ended without finishing); w50[] is every task of job "
        "array w50, and with --array w50[]:corr pairs the tasks by index. Until then it is held; if one "
        "ends otherwise it is cancelled, saying why.")).tag(config=True)
    array = Unicode("", help=(
        "Submit a job array: one task per index, e.g. 0-9, 1,3,5-11:2; %N runs at most N at a time "
        "(0-99%10). Each task gets $COMPUTEHUB_ARRAY_TASK_ID.")).tag(config=True)
    kind = Enum(list(KINDS), default_value="training", help="Kind of workload.").tag(config=True)
    hold = Bool(False, help="Submit it held: it starts only once released ('computehub release ID').").tag(
        config=True)
    begin = Unicode("", help=(
        "Do not start it before this time (Slurm's --begin): 2h or now+90m from now, 22:00 (the next), "
        "midnight, tomorrow, or a date like 2025-01-31T02:00 (local time). Until then it is held; "
        "'computehub release ID' lets it go sooner.")).tag(config=True)
    mail = Unicode("", help=(
        "Mail me when it begins, ends, fails or is requeued (preempted or its node lost): types "
        "separated by commas, or all (Slurm's --mail-type). A job array mails once when its first "
        "task starts and once when all have ended. Only where the admin set up mail.")).tag(config=True)

    aliases = {**ClientCommand.aliases, "gpus": "SubmitApp.gpus", "gpu-model": "SubmitApp.gpu_model",
               "workers": "SubmitApp.workers", "cpu": "SubmitApp.cpu", "memory": "SubmitApp.memory",
               "queue": "SubmitApp.queue", "priority": "SubmitApp.priority", "time": "SubmitApp.time_limit",
               "checkpoint-every": "SubmitApp.checkpoint_every", "after": "SubmitApp.after",
               "name": "SubmitApp.workload_name", "kind": "SubmitApp.kind", "array": "SubmitApp.array",
               "mail": "SubmitApp.mail", "begin": "SubmitApp.begin"}
    flags = {**ClientCommand.flags,
             "hold": ({"SubmitApp": {"hold": True}}, "Submit it held: it starts only once released.")}

    def spec(self) -> dict:
        if self.gpus < 0:
            raise UsageError(f"--gpus must be 0 or more, not {self.gpus}")
        if self.workers < 1:
            raise UsageError(f"--workers must be 1 or more, not {self.workers}")
        resources = {k: v for k, v in (("gpu", self.gpus), ("cpu", self.cpu), ("memory", self.memory))
                     if v or k == "gpu"}
        spec = {"kind": self.kind, "resources": resources, "workers": self.workers}
        for key, value in (("gpu_model", self.gpu_model), ("queue", self.queue), ("priority", self.priority),
                           ("name", self.workload_name)):
            if value:
                spec[key] = value
        if self.time_limit:
            spec["time_limit"] = parse_duration(self.time_limit, "--time")
        if self.checkpoint_every:
            spec["checkpoint_every"] = parse_duration(self.checkpoint_every, "--checkpoint-every")
        if self.after.strip():
            spec["after"] = [x.strip() for x in self.after.split(",") if x.strip()]
        if self.hold:
            spec["hold"] = True
        if self.begin.strip():
            spec["begin"] = parse_begin(self.begin, time.time())
        if self.array.strip():
            spec["array"] = self.array.strip()
        if self.mail.strip():
            spec["mail"] = self.mail.strip()       # checked by the service, which says what is wrong
        return spec

    def submit(self, spec: dict) -> tuple:
        """Submit ``spec`` (checked by ``spec()``), its begin counted from now by the service's clock
        (``ComputeHubClient.now``), not this machine's: (the client, the workload)."""
        ch = self.client()
        if self.begin.strip():
            spec["begin"] = parse_begin(self.begin, ch.now())
        return ch, ch.submit(**spec)

    def run(self):
        _, w = self.submit(self.spec())
        if self.json:
            return self.emit(w)
        wait = (" (an admin must approve it first: see 'computehub approvals')"
                if w["state"] == "awaiting_approval" else f" ({w['reason']})" if w["state"] == "held" else "")
        total = (w.get("resources") or {}).get("gpu", 0) * w.get("workers", 1)
        each = " each" if w.get("tasks") else ""
        print(f"{array_words(w)}{w['id']}  {w['state']}  queue {w['queue']}, {gpus_of(w)} "
              f"GPU{'' if total == 1 else 's'}{each}, priority {w['priority']}{wait}")
        print(f"see where it stands: computehub queue   cancel it: {cancel_hint(w)}")


class QueueApp(ClientCommand):
    name = "computehub queue"
    description = ("Your live workloads (or, with --all, every one you may see: a team lead's team, an "
                   "admin's everything) with state, position in line, ETA and the reason a waiting one "
                   "waits. POS is the place among all pending work (in its queue in brackets); the ETA "
                   "assumes running work ends at its declared time limit; '≥' marks one that is only a "
                   "lower bound, for work that would start on GPUs borrowed beyond its queue's guarantee.")
    examples = """
computehub queue
computehub queue --all --queue vision
computehub queue --json
"""
    queue = Unicode("", help="Only this queue.").tag(config=True)
    all = Bool(False, help="Everything you may see, not only your own.").tag(config=True)
    aliases = {**ClientCommand.aliases, "queue": "QueueApp.queue"}
    flags = {**ClientCommand.flags, "all": ({"QueueApp": {"all": True}}, "Everything you may see.")}

    def run(self):
        ch = self.client()
        user = None if self.all else ch.me()["name"]
        # Each waiting one with its explanation (position, ETA, why it waits), in the one request.
        listing = ch.list(user=user, queue=self.queue or None, limit=10_000, explain=True)
        # A job array's waiting tasks are one row in the table (squeue's way); the JSON has each.
        items = listing["workloads"] if self.json else collapse(listing["workloads"])
        if self.json:
            return self.emit(listing)
        if not items:
            return print("no live workloads" + ("" if self.all else " of yours; submit one with 'computehub submit'"))
        now = ch.now()          # the service's clock: its times are counted on it
        rows = []
        for w in items:
            e = w.get("explanation") or {}
            pos = f"{e['position']} ({e['position_in_queue']})" if "position" in e else (
                f"{w['position']} ({w['position_in_queue']})" if "position" in w else "")
            if w["state"] in ("pending", "held"):     # held: from when what it runs after ends, if it says
                eta = ("≥ " if e.get("eta_earliest") else "") + human_duration(e["eta_seconds"]) \
                    if e.get("eta_seconds") is not None else ("unknown" if e and w["state"] == "pending" else "")
                reason = e.get("reason") or w.get("reason")
            else:
                eta = ""
                nodes = ", ".join(f"{p['node']}:{','.join(map(str, p['gpus']))}" for p in w.get("placement", []))
                reason = e.get("reason") or w.get("reason") or (f"on {nodes}" if nodes else "")
                saved, started = w.get("checkpointed_at"), w.get("started_at")
                if w["state"] == "running" and saved and started and saved >= started:
                    reason += f"{'; ' if reason else ''}checkpoint saved {human_duration(now - saved)} ago"
                if w["state"] == "running" and w.get("saves_on_stop"):      # preempting it loses only a restart
                    reason += f"{'; ' if reason else ''}saves when stopped"
            age = human_duration(now - w["submitted_at"]) if w.get("submitted_at") else ""
            row = [w["id"], name_of(w), w["queue"], w["kind"], gpus_of(w), w["state"], age, pos, eta, reason]
            rows.append(row[:1] + [w["user"]] + row[1:] if self.all else row)
        header = ["ID", "NAME", "QUEUE", "KIND", "GPUS", "STATE", "AGE", "POS", "ETA", "REASON"]
        print(table(rows, header[:1] + ["USER"] + header[1:] if self.all else header))


class CancelApp(ClientCommand):
    name = "computehub cancel"
    description = ("computehub cancel ID [ID ...]: cancel workloads by id; waiting ones leave the line, "
                   "running ones are stopped. Each failure is one line on stderr.")
    examples = """
computehub cancel w0000042
computehub cancel w0000042 w0000043
computehub cancel --array w0000050          # every task of the array still waiting or running
computehub cancel --array w0000050 --state pending   # its tasks in line; those running go on
computehub cancel 'w0000050[7]'              # task 7 of that array
"""
    positional, usage_args = -1, "one or more workload ids"
    array = Bool(False, help=ARRAY_FLAG).tag(config=True)
    state = Unicode("", help=STATE_FLAG).tag(config=True)
    aliases = {**ClientCommand.aliases, "state": "CancelApp.state"}
    flags = {"array": ({"CancelApp": {"array": True}}, ARRAY_FLAG)}

    def run(self, *ids):
        def line(w: dict) -> str:
            then = "  (it is being stopped; its GPUs return once it has)" if w["state"] == "cancelling" else ""
            return f"{w['id']}  {w['state']}{then}"

        states, ch = states_of(self.state, self.array), self.client()
        if self.array:
            return act_on_arrays(ch, ids, "cancel", states=states)
        return for_each_id(ids, by_index(ch, ch.cancel), line)


class UsageApp(ClientCommand):
    name = "computehub usage"
    description = ("GPU-hours and cost in a time window, grouped by user, queue, GPU flavor, workload or job "
                   "array. "
                   "You see your own usage, a team lead their team's, an admin everybody's.")
    examples = """
computehub usage
computehub usage --since 30d --by queue
computehub usage --since 2025-01-01 --until 2025-02-01 --by flavor --json
computehub usage --since 30d --by array      # what each sweep cost
"""
    since = Unicode("7d", help="Start: a duration ago (7d, 12h, 30m) or a date (2025-01-31).").tag(config=True)
    until = Unicode("", help="End: a duration ago or a date (default: now).").tag(config=True)
    by = Enum(["user", "queue", "flavor", "workload", "array"], default_value="user",
              help="Group the rows by user, queue, flavor, workload or job array.").tag(config=True)
    aliases = {**ClientCommand.aliases, "since": "UsageApp.since", "until": "UsageApp.until",
               "by": "UsageApp.by"}

    def run(self):
        now = time.time()
        start = parse_when(self.since, "--since", now)
        end = parse_when(self.until, "--until", now) if self.until else now
        if start >= end:
            raise UsageError("--since must be before --until")
        data = self.client().usage(start=start, end=end, by=self.by)
        if self.json:
            return self.emit(data)
        span = f"{_date(data['start'])} → {_date(data['end'])}"
        if not data["rows"]:
            return print(f"no GPU usage {span}")
        who = ["user", "queue"] if self.by in OWNED else []       # whose, and where
        rows = [[r[self.by], *(r.get(k, "") for k in who), _amount(r["gpu_hours"]), _amount(r["cost"])]
                for r in data["rows"]]
        rows.append(["total", *("" for _ in who), _amount(sum(r["gpu_hours"] for r in data["rows"])),
                     _amount(sum(r["cost"] for r in data["rows"]))])
        print(f"GPU usage {span}")
        print(table(rows, [self.by.upper(), *(k.upper() for k in who), "GPU-HOURS", "COST"]))


def _amount(x: float) -> str:
    return "0" if not x else "<0.01" if x < 0.005 else f"{x:,.2f}"


def _date(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")
