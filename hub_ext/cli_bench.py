"""``computehub bench <scale|api|replay|replay-grid|slurm|array-ops|what-if|loop-lag|line-plan|own-order|
panel|mail|spawn|history>``: run one benchmark of bench/.

Each benchmark is a script in the repository's ``bench/`` folder (benchmarks are not
part of the installed package); this command runs it with the same Python and passes
every option after the benchmark's name through, so ``computehub bench replay
--clusters 05`` is ``python bench/replay.py --clusters 05``. Each writes its JSON
under ``bench/results/`` and prints its tables, medians and ratios. See bench/README.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .cli import Command, UsageError

BENCHMARKS = {
    "scale": ("scale.py", "scheduling cycle time and admissions/s with 1k-50k pending on 100-5,000 nodes"),
    "api": ("api_load.py", "REST API submissions/s and latency through the real hub and proxy"),
    "replay": ("replay.py", "the ITP GPU cluster traces under every policy, with the published figures"),
    "replay-grid": ("replay_grid.py", "the replay's targets for the default under 5 team splits and "
                                      "over-estimates at once, beside a variant's"),
    "slurm": ("slurm.py", "end-to-end job throughput against Slurm on this machine"),
    "array-ops": ("array_ops.py", "release, update, hold and cancel of a 1,000-task job array: one request, "
                                  "one per task, and Slurm's"),
    "what-if": ("what_if.py", "a dry run of a change (update --test-only) beside the position query, "
                              "10,000 pending"),
    "loop-lag": ("loop_lag.py", "how long the service's event loop stalls while it answers a position query "
                                "deep in 10,000 pending: its estimate on the loop, and in the worker thread"),
    "line-plan": ("line_plan.py", "20 waiting workloads explained by an estimate each, against one plan of the "
                                  "whole line of 10,000 pending"),
    "own-order": ("own_order.py", "the order of 10,000 pending with work users put first (computehub top) "
                                  "against none"),
    "panel": ("panel_poll.py", "one look of the JupyterLab panel with a 1,000-task job array waiting"),
    "mail": ("mail_rounds.py", "the mailer's rounds over 1,000 ended jobs: each asking for mail, and none"),
    "spawn": ("spawn_queue.py", "time the queue adds to a notebook spawn"),
    "history": ("history.py", "reads through the hub with a year of ended work against none"),
}


def bench_dir() -> Path | None:
    """The repository's bench/ folder next to this package, or $COMPUTEHUB_BENCH_DIR."""
    env = os.environ.get("COMPUTEHUB_BENCH_DIR")
    d = Path(env) if env else Path(__file__).resolve().parents[1] / "bench"
    return d if d.is_dir() else None


class BenchApp(Command):
    name = "computehub bench"
    description = ("Run one of ComputeHub's benchmarks (from a source checkout): "
                   + "; ".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items())
                   + ". Options after the name go to the benchmark ('computehub bench NAME --help').")
    examples = """
computehub bench scale --quick
computehub bench replay --clusters 05 --policies fifo,fifo-skip,default
computehub bench slurm --jobs 500
"""

    def initialize(self, argv=None):
        # No traitlets parsing: everything after the benchmark's name belongs to it.
        self.bench_argv = list(sys.argv[2:] if argv is None else argv)

    def start(self):
        argv = self.bench_argv
        if not argv or argv[0] in ("-h", "--help", "--help-all"):
            print(self.description)
            print("\nExamples:" + self.examples.rstrip())
            return 0 if argv else 2
        name, rest = argv[0], argv[1:]
        if name not in BENCHMARKS:
            raise UsageError(f"unknown benchmark {name!r} (choose from {', '.join(BENCHMARKS)})")
        folder = bench_dir()
        script = folder / BENCHMARKS[name][0] if folder else None
        if script is None or not script.is_file():
            raise UsageError("the benchmarks live in a source checkout's bench/ folder, which this "
                             "installation lacks (set COMPUTEHUB_BENCH_DIR to one)")
        try:
            return subprocess.call([sys.executable, str(script), *rest], cwd=script.parent.parent)
        except KeyboardInterrupt:
            return 130
