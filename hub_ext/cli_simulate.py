"""``computehub simulate`` and ``computehub demo``: trace replay from the command line.

Both drive ``scheduler.replay`` (the real scheduler on a virtual clock); see
docs/simulate.md for the policies, the tenant rule and the metrics.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from traitlets import Bool, Enum, Float, Int, Unicode

from scheduler.replay import (DECLARED_LIMITS, FREE, OVERESTIMATE, POLICIES, REALISTIC, SAMPLE_TRACE, Restart,
                              declared_limit, default_capacity, floors, load, simulate, table)
from scheduler.replay.simulate import StuckError, check_fits

from .cli import Command, UsageError


def _load_trace(path: str, teams: int, max_jobs: int):
    if not path:
        raise UsageError("simulate needs --trace FILE (a CSV with job_id, submission_time, duration, "
                         "num_gpu columns), or --trace sample for the shipped sample")
    p = SAMPLE_TRACE if path == "sample" else Path(path)
    if not p.is_file():
        raise UsageError(f"trace file {path!r} not found" if not p.exists() else f"{path!r} is not a file")
    if teams < 1:
        raise UsageError(f"--teams must be at least 1, not {teams}")
    if max_jobs < 0:
        raise UsageError(f"--max-jobs must not be negative, not {max_jobs}")
    try:
        jobs = load(p, n_teams=teams, limit=max_jobs or None)
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"bad trace: {e}") from None
    except OSError as e:
        raise UsageError(f"cannot read trace {path!r}: {e.strerror or e}") from None
    if not jobs:
        raise UsageError(f"trace {path!r} has no jobs")
    return p, jobs


def _capacity(jobs, given: int) -> tuple[int, str]:
    if given < 0:
        raise UsageError(f"--capacity-gpus must be a positive number of GPUs, not {given}")
    if given == 0:
        return default_capacity(jobs), "derived: 8 × ceil(mean GPUs busy / 0.8 / 8), at least the largest job"
    try:
        check_fits(jobs, given)
    except ValueError as e:
        raise UsageError(f"--capacity-gpus {given} is too small: {e}") from None
    return given, "given"


def _replay(jobs, capacity: int, policy: str, teams: int, limits: str, after_cycle=None,
            restart: Restart = FREE, overestimate: float = OVERESTIMATE) -> dict:
    try:
        return simulate(jobs, capacity, policy, n_teams=teams, declared_limits=limits,
                        after_cycle=after_cycle, restart=restart, overestimate=overestimate)
    except StuckError as e:      # an engine bug, not the caller's: say so plainly
        raise SystemExit(f"computehub: replay failed (scheduler bug, please report): {e}") from None


class SimulateApp(Command):
    name = "computehub simulate"
    description = ("Replay a GPU cluster trace through ComputeHub's scheduler on a virtual clock "
                   "(the same engine the service runs) and report job completion time, queueing "
                   "delay, makespan, GPU utilisation, preemptions and fairness across teams.")
    examples = """
computehub simulate --trace cluster05.csv --compare
computehub simulate --trace cluster04.csv --capacity-gpus 624 --policy default --json
"""

    trace = Unicode("", help="Trace CSV file with columns job_id, submission_time (seconds), "
                    "duration (seconds) and num_gpu (GPUs); 'sample' = the shipped sample.").tag(config=True)
    capacity_gpus = Int(0, help="Cluster size in GPUs (nodes of 8 GPUs). 0 = derive from the trace: "
                        "8 × ceil(mean GPUs busy / 0.8 / 8), at least the largest job.").tag(config=True)
    policy = Enum(list(POLICIES), default_value="default",
                  help="Scheduling policy (an engine configuration): "
                  + "; ".join(f"{p.name}: {p.description}" for p in POLICIES.values())).tag(config=True)
    compare = Bool(False, help="Replay FIFO and --policy side by side (FIFO and default when --policy "
                   "is fifo).").tag(config=True)
    teams = Int(4, help="Number of tenant teams (count) derived from job ids; each gets an equal GPU "
                "guarantee under the default policy.").tag(config=True)
    declared_limits = Enum(list(DECLARED_LIMITS), default_value="policy",
                           help="Run-time limits jobs declare (for backfill, SJF, SRTF and ETAs): 'oracle' = "
                           "their real duration in seconds; 'estimate' = duration × a per-job over-estimate "
                           "factor in [1, --overestimate]; 'none' = no limit; 'policy' = each policy's own "
                           "(oracle for sjf and srtf, estimate for default and default-age, none for the "
                           "rest).").tag(config=True)
    overestimate = Float(OVERESTIMATE, help="Largest over-estimate factor of declared limits (≥ 1) with "
                         "'estimate': each job's factor is uniform in [1, this], derived from its id.").tag(config=True)
    restart_cost = Float(60.0, help="Seconds a preempted job spends restarting before it makes progress "
                         "again (0 with --checkpoint-every 0 = free preemption).").tag(config=True)
    checkpoint_every = Float(1800.0, help="Seconds of progress between a job's checkpoints; a preemption "
                             "loses the work since the last one (0 = nothing lost).").tag(config=True)
    max_jobs = Int(0, help="Replay only the first N jobs (count) of the trace; 0 = all.").tag(config=True)
    json = Bool(False, help="Print the metrics as JSON instead of a table.").tag(config=True)

    aliases = {
        "trace": "SimulateApp.trace",
        "capacity-gpus": "SimulateApp.capacity_gpus",
        "policy": "SimulateApp.policy",
        "teams": "SimulateApp.teams",
        "declared-limits": "SimulateApp.declared_limits",
        "max-jobs": "SimulateApp.max_jobs",
        "overestimate": "SimulateApp.overestimate",
        "restart-cost": "SimulateApp.restart_cost",
        "checkpoint-every": "SimulateApp.checkpoint_every",
    }
    flags = {
        "json": ({"SimulateApp": {"json": True}}, "Print the metrics as JSON instead of a table."),
        "compare": ({"SimulateApp": {"compare": True}}, "Replay FIFO and --policy side by side."),
    }

    def policies(self) -> list[str]:
        if not self.compare:
            return [self.policy]
        return ["fifo", self.policy if self.policy != "fifo" else "default"]

    def start(self):
        self.refuse_extra_args()
        path, jobs = _load_trace(self.trace, self.teams, self.max_jobs)
        capacity, rule = _capacity(jobs, self.capacity_gpus)
        if not self.overestimate >= 1:
            raise UsageError(f"--overestimate must be at least 1, not {self.overestimate:g}")
        try:
            restart = Restart(self.restart_cost, self.checkpoint_every)
        except ValueError as e:
            raise UsageError(f"--restart-cost/--checkpoint-every: {e}") from None
        results = [_replay(jobs, capacity, p, self.teams, self.declared_limits, restart=restart,
                           overestimate=self.overestimate) for p in self.policies()]
        floor = floors(jobs, capacity)
        if self.json:
            print(json.dumps({"trace": path.name, "capacity_gpus": capacity, "capacity_rule": rule,
                              "floors": floor, "results": results}, indent=2, default=_json_default))
            return 0
        print(table(results, title=f"{path.name}: {len(jobs)} jobs on {capacity} GPUs ({rule}); "
                                   f"{self.teams} teams; declared limits: {self.declared_limits}; "
                                   f"preemption cost: {restart.describe()}"))
        print(f"No policy can beat, on this trace: a p99 JCT of {floor['jct_p99_floor_h']:.2f} h (the p99 "
              f"of the durations), a makespan of {floor['makespan_floor_h']:.1f} h.")
        return 0


def _json_default(o):
    if isinstance(o, float) and math.isnan(o):
        return None
    raise TypeError(f"cannot encode {type(o).__name__}")


class ReplayDemoApp(Command):
    name = "computehub demo --replay"
    description = ("A first look at the scheduler: replay the shipped sample trace (400 real jobs "
                   "of an ITP GPU cluster) with FIFO and ComputeHub's default policy side by side, "
                   "then let a few jobs that wait halfway through explain where they stand and why.")

    explain_count = Int(3, help="How many waiting jobs (count) explain themselves.").tag(config=True)
    at_fraction = Float(0.5, help="When to look at the waiting jobs, as a fraction (0..1) of the "
                          "trace's submission span (seconds).").tag(config=True)
    aliases = {"explain": "ReplayDemoApp.explain_count", "at": "ReplayDemoApp.at_fraction"}

    def start(self):
        self.refuse_extra_args()
        frac = self.at_fraction
        if not 0 <= frac <= 1:
            raise UsageError(f"--at expects a fraction between 0 and 1, not {frac:g}")
        if self.explain_count < 0:
            raise UsageError(f"--explain must not be negative, not {self.explain_count}")
        path, jobs = _load_trace("sample", 4, 0)
        capacity = default_capacity(jobs)
        t0, t1 = jobs[0].submit, jobs[-1].submit
        probe = Probe(t0 + frac * (t1 - t0), self.explain_count, jobs)
        # As in the benchmark: the default sees estimates (never the true durations) and pays for
        # each preemption (a restart plus the work since the last checkpoint).
        results = [_replay(jobs, capacity, "fifo", 4, "policy", restart=REALISTIC),
                   _replay(jobs, capacity, "default", 4, "policy", after_cycle=probe, restart=REALISTIC)]
        print(table(results, title=f"Sample trace {path.name}: {len(jobs)} jobs on {capacity} GPUs "
                                   f"({capacity // 8} nodes of 8), 4 teams"))
        fifo, dflt = results
        print(f"\nThe default policy finishes jobs {fifo['jct_avg_s'] / dflt['jct_avg_s']:.2f}× faster on "
              f"average than FIFO: backfill starts short jobs in gaps and teams reclaim their guaranteed "
              f"share by preempting borrowers (jobs checkpoint and resume).")
        print()
        print(probe.report())
        return 0


class Probe:
    """Once the replay passes ``at``, ask the first ``count`` waiting jobs to explain themselves."""

    def __init__(self, at: float, count: int, jobs):
        self.at, self.count, self.jobs = at, count, jobs
        self.now: float | None = None
        self.pending = 0
        self.running = 0
        self.explained: list[tuple[object, dict]] = []

    def __call__(self, sched, now, res, workload_to_job):
        if self.now is not None or now < self.at or not sched.state.pending:
            return
        self.now, self.pending, self.running = now, len(sched.state.pending), len(sched.state.holding)
        # The order as it stands after this cycle's admissions, the one explain() counts positions in.
        ids = [w.id for w in sched.engine.order()][: self.count]
        self.explained = [(self.jobs[workload_to_job[i]], sched.explain(i, now=now)) for i in ids]

    def report(self) -> str:
        if self.now is None:
            return "(no job was waiting after that point of the replay)"
        hours = (self.now - self.jobs[0].submit) / 3600
        who = ("The first in line explains itself:" if len(self.explained) == 1 else
               f"The first {len(self.explained)} in line explain themselves:" if self.explained else "")
        lines = [f"At {hours:.1f} h into the default replay, {self.pending} jobs wait and "
                 f"{self.running} run. {who}".rstrip()]
        for job, e in self.explained:
            limit = f"declared {declared_limit(job, 'estimate') / 3600:.1f} h, runs {job.duration / 3600:.1f} h"
            lines.append(f"\n  {e['id']}  (trace job {job.id[:8]}, {job.team}, {job.gpus} GPU"
                         f"{'s' if job.gpus > 1 else ''}, {limit})")
            lines.append(f"    position {e['position']} of {e['pending']} overall, "
                         f"{e['position_in_queue']} of {e['queue_length']} in {e['queue']}")
            lines.append(f"    why:  {e['reason']}")
            if e.get("eta") is not None:
                at_least = "at least " if e.get("eta_earliest") else ""
                lines.append(f"    ETA:  in {at_least}{e['eta_seconds'] / 3600:.1f} h ({e['eta_reason']})")
            else:
                lines.append(f"    ETA:  {e['eta_reason']}")
        return "\n".join(lines)
