"""The ``computehub`` command: one traitlets ``Application`` with subcommands.

    computehub simulate --trace FILE [--capacity-gpus N] [--policy P] [--compare] [--json]
    computehub demo

Subcommands live in their own modules (``cli_simulate``) and are imported only
when used. Bad input never ends in a traceback: ``main`` prints one line,
``computehub: error: ...``, on stderr and returns exit code 2.
"""

from __future__ import annotations

import re
import sys

from traitlets import TraitError
from traitlets.config import Application
from traitlets.config.loader import ArgumentError, KVArgParseConfigLoader, _KVArgParser

USAGE_EXIT = 2


class UsageError(Exception):
    """The caller's mistake: reported as one line on stderr, exit code 2."""


class _Parser(_KVArgParser):
    def error(self, message):      # argparse would print usage and exit
        raise UsageError(message)


class _Loader(KVArgParseConfigLoader):
    parser_class = _Parser

    def _handle_unrecognized_alias(self, arg: str) -> None:
        raise UsageError(f"unknown option --{arg}")


class Command(Application):
    """Base of ``computehub`` and its subcommands.

    traitlets turns a bad value into a log line and exit code 1; here it
    propagates to ``main`` instead, which reports it in one line and exits 2.
    """

    log_format = "%(message)s"

    def _create_loader(self, argv, aliases, flags, classes):
        return _Loader(argv, aliases, flags, classes=classes, log=self.log, subcommands=self.subcommands)

    def initialize(self, argv=None):
        self.parse_command_line(argv)

    def parse_command_line(self, argv=None):
        # The undecorated method: TraitError / ArgumentError reach main().
        return Application.parse_command_line.__wrapped__(self, argv)

    def initialize_subcommand(self, subc, argv=None):
        return Application.initialize_subcommand.__wrapped__(self, subc, argv)

    def option_name(self, trait: str) -> str:
        """How the command line spells a trait (its alias), for messages."""
        for alias, target in self.aliases.items():
            target = target[0] if isinstance(target, tuple) else target
            if target.endswith("." + trait):
                alias = alias[-1] if isinstance(alias, tuple) else alias
                return ("-" if len(alias) == 1 else "--") + alias
        return "--" + trait.replace("_", "-")

    def refuse_extra_args(self) -> None:
        if self.extra_args:
            raise UsageError(f"unexpected argument {self.extra_args[0]!r} "
                             f"(see '{self.name} --help')")


class ComputeHub(Command):
    name = "computehub"
    description = ("ComputeHub: one quota-and-priority GPU scheduler for JupyterHub. "
                   "Run 'computehub <command> --help' for a command's options.")
    examples = """
computehub demo                          # the whole platform on 127.0.0.1 (a hub, the service, demo users)
computehub demo --replay                 # watch the scheduler replay a small real trace
computehub simulate --trace cluster05.csv --compare
computehub simulate --trace sample --policy sjf --json
"""
    subcommands = {
        "serve": ("hub_ext.app.ComputeHubService",
                  "Run the scheduler as a JupyterHub service (REST API, event stream, metrics, admin pages)."),
        "bench": ("hub_ext.cli_bench.BenchApp",
                  "Run a benchmark from bench/ (scale, api, replay, replay-grid, slurm, spawn); options go to it."),
        "simulate": ("hub_ext.cli_simulate.SimulateApp",
                     "Replay a GPU cluster trace through the scheduler on a virtual clock and "
                     "print job completion times, queueing, utilisation and fairness."),
        "demo": ("hub_ext.demo.DemoApp",
                 "Run the whole platform on 127.0.0.1 (JupyterHub, proxy, ComputeHub, demo users); "
                 "--replay replays a real trace instead."),
        "submit": ("hub_ext.cli_client.SubmitApp", "Submit a training, batch or inference workload."),
        "queue": ("hub_ext.cli_client.QueueApp",
                  "Your workloads with state, position, ETA and the reason a waiting one waits."),
        "cancel": ("hub_ext.cli_client.CancelApp", "Cancel workloads by id."),
        "update": ("hub_ext.cli_client_update.UpdateApp",
                   "Change waiting workloads: GPUs, memory, time limit, queue, class, name (ID ... OPTIONS)."),
        "hold": ("hub_ext.cli_client_holds.HoldApp", "Keep waiting workloads from starting until released."),
        "release": ("hub_ext.cli_client_holds.ReleaseApp", "Let held workloads join the line."),
        "top": ("hub_ext.cli_client_holds.TopApp", "Put waiting workloads first among your own (ID ...)."),
        "mail": ("hub_ext.cli_client_holds.MailApp", "What a live workload mails you about (ID TYPES)."),
        "mail-address": ("hub_ext.cli_client_holds.MailAddressApp",
                         "Where your mail goes; give your own address where the admin allows ([ADDRESS|none])."),
        "array-limit": ("hub_ext.cli_client_holds.ArrayLimitApp",
                        "How many of a job array's tasks may run at a time (ID N)."),
        "run": ("hub_ext.cli_client_jobs.RunApp", "Run a command as a training job through the queue (-- COMMAND)."),
        "infer": ("hub_ext.cli_client_jobs.InferApp",
                  "Start an inference service through the queue, behind the hub's login (-- COMMAND)."),
        "jobs": ("hub_ext.cli_client_jobs.JobsApp", "Your training, batch and inference jobs."),
        "logs": ("hub_ext.cli_client_jobs.LogsApp", "A job's output: logs ID [--follow]."),
        "checkpoint": ("hub_ext.cli_client_jobs.CheckpointApp",
                       "From inside a job: it saved a checkpoint (preemption then loses only the work since)."),
        "quota": ("hub_ext.cli_client_admin.QuotaApp",
                  "Queues with GPU guarantee, limit and usage; 'quota set' changes one (admins)."),
        "usage": ("hub_ext.cli_client.UsageApp", "GPU-hours and cost by user, queue, flavor or workload."),
        "classes": ("hub_ext.cli_client_queues.ClassesApp",
                    "Priority classes; 'classes set/delete NAME' (admins)."),
        "nodes": ("hub_ext.cli_client_admin.NodesApp", "Nodes and GPUs; 'nodes drain/undrain NAME' (admins)."),
        "approvals": ("hub_ext.cli_client_admin.ApprovalsApp", "Workloads awaiting approval (admins)."),
        "approve": ("hub_ext.cli_client_admin.ApproveApp", "Approve a workload awaiting approval (admins)."),
        "reject": ("hub_ext.cli_client_admin.RejectApp", "Reject a workload awaiting approval (admins)."),
    }

    def start(self):
        if self.subapp is not None:
            return self.subapp.start()
        if self.extra_args:
            raise UsageError(f"unknown command {self.extra_args[0]!r} "
                             f"(commands: {', '.join(self.subcommands)})")
        self.print_description()
        self.print_subcommands()
        return USAGE_EXIT


_TRAIT_ERROR = re.compile(r"The '(\w+)' trait of an? (\w+) instance expected (.+), not the \w+ (.+?)\.?$")
_CLASS_OPTION = re.compile(r"--[A-Za-z]\w*\.(\w+)")
_EXPECTED = {"an int": "a whole number", "a float": "a number", "a unicode string": "text"}


def _describe(app: Application | None, e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    sub = app.subapp if app is not None and app.subapp is not None else app
    if sub is not None and not isinstance(sub, Command):
        # serve: its settings are Class.trait, in a config file or as --Class.trait=...
        from scheduler.config_checks import describe
        return describe(e)

    def option(trait: str) -> str:
        return sub.option_name(trait) if isinstance(sub, Command) else "--" + trait.replace("_", "-")

    m = _TRAIT_ERROR.match(msg)
    if m:
        trait, _cls, expected, got = m.groups()
        return f"{option(trait)} expects {_EXPECTED.get(expected, expected)}, not {got}"
    return _CLASS_OPTION.sub(lambda m: option(m.group(1)), msg)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``computehub`` console script; returns the exit code."""
    app = None
    try:
        app = ComputeHub.instance()
        app.initialize(argv)
        rc = app.start()
    except (UsageError, TraitError, ArgumentError) as e:
        print(f"computehub: error: {_describe(app, e)}", file=sys.stderr)
        return getattr(e, "status", USAGE_EXIT)
    except KeyboardInterrupt:
        print("computehub: interrupted", file=sys.stderr)
        return 130
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
