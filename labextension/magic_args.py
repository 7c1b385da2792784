"""The options the magics take (magics.py), checked as the command line checks them."""

from __future__ import annotations

import time

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments

from hub_ext.cli import UsageError as CommandLineMistake
from hub_ext.cli_client_arrays import STATE_FLAG, states_of
from hub_ext.cli_time import parse_begin


def submitting(f):
    """The options of the magics that submit work (%submit, %serve)."""
    for a in reversed([
        argument("-h", "--help", action="store_true", help="Show this help."),
        argument("--gpus", type=int, default=1, help="GPUs per worker (default 1)."),
        argument("--gpu-model", default=None, help="GPU model, e.g. a100 (default: any)."),
        argument("--cpu", default=None, help="CPU per worker: cores ('8', '0.5') or millicores ('500m')."),
        argument("--memory", default=None, help="Memory per worker, e.g. 64Gi, 512Mi."),
        argument("--queue", default=None, help="Queue (default: the first one open to your groups)."),
        argument("--priority", default=None, help="Priority class (default: training; inference for %%serve)."),
        argument("--time", default=None, help="Run-time limit: seconds or 90m, 2h, 1d. Declaring it gives an "
                                               "ETA and lets the job start early in gaps (backfill)."),
        argument("--checkpoint-every", default=None, help="How often the job saves a checkpoint: seconds "
                                                          "or 30m, 1h. Swaps for shorter work then wait until "
                                                          "it has just saved (default: its class's)."),
        argument("--name", default=None, help="A name for the job."),
        argument("--hold", action="store_true", help="Submit it held: it starts only once released "
                                                     "(%%release ID)."),
        argument("--begin", default=None, help="Not before this time: 2h or now+90m from now, 22:00, "
                                               "midnight, tomorrow, or 2025-01-31T02:00 (local time); held "
                                               "until then (Slurm's --begin)."),
        argument("--after", default=None, help="Run after these jobs of yours: ids separated by commas "
                                               "({job.id} works), each with :ok (the default: it finished), "
                                               ":any or :failed; {sweep.id}[] is every task of an array "
                                               "(with --array, {sweep.id}[]:corr pairs tasks by index). "
                                               "It is held until then."),
        argument("--mail", default=None, help="Mail me when it begins, ends, fails or is requeued: "
                                              "types separated by commas, or all (where the admin set "
                                              "up mail)."),
    ]):
        f = a(f)
    return f


def on_ids(*extra):
    """The arguments of a magic that acts on job ids: ``-h``, ``extra`` options, then the ids."""
    def wrap(f):
        for a in (argument("ids", nargs="*", help="Job ids."), *reversed(extra),
                  argument("--array", action="store_true", help="The ids name job arrays (an array's first "
                                                                "task's id): act on each of its tasks."),
                  argument("-h", "--help", action="store_true", help="Show this help.")):
            f = a(f)
        return magic_arguments()(f)
    return wrap


def picked_states(args, allowed=None) -> tuple[str, ...] | None:
    """``--state``'s states, checked as the CLI checks them (None: not given)."""
    try:
        return states_of(getattr(args, "state", "") or "", args.array, *(allowed,) if allowed else ())
    except CommandLineMistake as e:
        raise UsageError(str(e)) from None


STATE = argument("--state", default="", help=STATE_FLAG)
UNTIL = argument("--until", default=None, help="Only until this time, then it joins the line by itself: 2h, "
                                               "22:00, midnight, tomorrow, 2025-01-31T02:00 (local time).")


def until_time(args) -> float | None:
    """``--until``'s time (None: not given), read as the CLI reads it."""
    given = getattr(args, "until", None)
    if given is None:
        return None
    try:
        return parse_begin(given, time.time(), "--until")
    except CommandLineMistake as e:
        raise UsageError(str(e)) from None
