"""What a replay is judged by. Definitions (times in seconds of the trace's clock):

* JCT (job completion time) = finish − submission; average, median and p99.
* Queueing delay = first admission − submission (time waiting before the job
  first started; waiting again after a preemption is in the JCT, not here).
* Makespan = last finish − first submission.
* GPU utilisation = busy GPU-seconds / (capacity × makespan); a job is busy
  from each admission to its end or preemption (GPUs allocated, the usual
  meaning for a scheduler). Useful utilisation leaves out what preemption
  wasted (restarts and work since the last checkpoint, the lost GPU-hours):
  the GPU-seconds of the jobs' own durations over the same, so a policy that
  preempts cannot look busier by throwing work away.
* Preemptions = how many times a running job was stopped for another; lost
  GPU-hours = what preempted runs held without keeping (restart time and work
  since the last checkpoint, see ``costs.Restart``). Churn as one job's owner
  sees it: how many jobs were preempted at all, and the most times one was.
* Floors (``floors``) = what no policy can beat on a trace: the p99 of the jobs'
  durations for the p99 JCT, and for the makespan the later of the last job's
  submission + duration and all the work spread over every GPU.
* Fairness = Jain's index over teams of each team's mean slowdown, where a
  job's slowdown is JCT / duration (1 = it never waited). Slowdown rather than
  JCT so that a team of long jobs is not "unfairly" treated merely for having
  long jobs; Jain's index (Σx)² / (n·Σx²) is 1 when every team sees the same
  mean slowdown and 1/n when one team bears all of it.
* Percentiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

import math
from collections import defaultdict

HOUR = 3600.0


def percentile(values, q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation; NaN for no values."""
    xs = sorted(values)
    if not xs:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100, not {q}")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values) -> float:
    xs = list(values)
    return sum(xs) / len(xs) if xs else math.nan


def jain(values) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = equal, 1/n = one takes all; NaN for none."""
    xs = list(values)
    if not xs:
        return math.nan
    sq = sum(x * x for x in xs)
    if sq == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sq)


def summarize(outcome) -> dict:
    """The metrics of one replay (a ``simulate.Outcome``) as a flat JSON-ready dict."""
    recs = outcome.records
    done = [r for r in recs if r.finish is not None]
    if len(done) != len(recs):
        raise ValueError(f"{len(recs) - len(done)} job(s) of the replay did not finish")
    jct = [r.jct for r in done]
    wait = [r.queueing for r in done]
    if done:
        first = min(r.job.submit for r in done)
        makespan = max(r.finish for r in done) - first
    else:
        makespan = 0.0
    busy = sum(r.busy_gpu_seconds for r in done)
    by_team: dict[str, list[float]] = defaultdict(list)
    for r in done:
        by_team[r.job.team].append(r.jct / r.job.duration)
    team_slowdown = {t: mean(v) for t, v in sorted(by_team.items())}
    out = {
        "policy": outcome.policy,
        "jobs": len(recs),
        "capacity_gpus": outcome.capacity_gpus,
        "teams": outcome.n_teams,
        "declared_limits": outcome.declared_limits,
        "jct_avg_s": mean(jct),
        "jct_median_s": percentile(jct, 50),
        "jct_p99_s": percentile(jct, 99),
        "queue_avg_s": mean(wait),
        "queue_p99_s": percentile(wait, 99),
        "makespan_s": makespan,
        "gpu_utilisation": busy / (outcome.capacity_gpus * makespan) if makespan > 0 else 0.0,
        "gpu_useful_utilisation": (busy - sum(r.lost_gpu_seconds for r in done))
        / (outcome.capacity_gpus * makespan) if makespan > 0 else 0.0,
        "preemptions": outcome.preemptions,
        "preempted_jobs": sum(1 for r in done if r.preemptions),
        "max_preemptions": max((r.preemptions for r in done), default=0),
        "lost_gpu_h": sum(r.lost_gpu_seconds for r in done) / HOUR,
        "restart_cost": outcome.restart,
        "jain_fairness": jain(team_slowdown.values()),
        "slowdown_avg": mean(r.jct / r.job.duration for r in done),
        "team_slowdown": team_slowdown,
        "cycles": outcome.cycles,
        "cycle_seconds": outcome.cycle_seconds,
        "wall_seconds": outcome.wall_seconds,
    }
    for k in ("jct_avg", "jct_median", "jct_p99", "queue_avg", "queue_p99", "makespan"):
        out[k + "_h"] = out[k + "_s"] / HOUR
    return out


def floors(jobs, capacity_gpus: int) -> dict:
    """What no policy can beat on ``jobs`` (each JCT is at least its job's duration; the last
    job cannot end before its submission plus its duration, nor all the work before the
    capacity has run it), so that a figure can be read against the best possible:
    ``jct_p99_floor_h``, the p99 of the durations; ``makespan_floor_h``, the longer of the
    two bounds on the makespan."""
    if not jobs:
        return {"jct_p99_floor_h": 0.0, "makespan_floor_h": 0.0}
    first = min(j.submit for j in jobs)
    last_end = max(j.submit + j.duration for j in jobs) - first
    all_work = sum(j.gpus * j.duration for j in jobs) / capacity_gpus
    return {"jct_p99_floor_h": percentile([j.duration for j in jobs], 99) / HOUR,
            "makespan_floor_h": max(last_end, all_work) / HOUR}


# Rows of the side-by-side table: (label, key, format).
TABLE_ROWS = [
    ("jobs", "jobs", "{:d}"),
    ("capacity (GPUs)", "capacity_gpus", "{:d}"),
    ("avg JCT (h)", "jct_avg_h", "{:.2f}"),
    ("median JCT (h)", "jct_median_h", "{:.2f}"),
    ("p99 JCT (h)", "jct_p99_h", "{:.2f}"),
    ("avg queueing (h)", "queue_avg_h", "{:.2f}"),
    ("p99 queueing (h)", "queue_p99_h", "{:.2f}"),
    ("makespan (h)", "makespan_h", "{:.1f}"),
    ("GPU utilisation", "gpu_utilisation", "{:.1%}"),
    ("useful GPU utilisation", "gpu_useful_utilisation", "{:.1%}"),
    ("preemptions", "preemptions", "{:d}"),
    ("jobs preempted", "preempted_jobs", "{:d}"),
    ("most preemptions of one job", "max_preemptions", "{:d}"),
    ("GPU-h lost to preemption", "lost_gpu_h", "{:.1f}"),
    ("Jain fairness (teams)", "jain_fairness", "{:.3f}"),
    ("cycles", "cycles", "{:d}"),
    ("replay wall time (s)", "wall_seconds", "{:.2f}"),
]


def table(results: list[dict], title: str = "") -> str:
    """A plain-text table with one column per result (policy)."""
    head = ["metric"] + [r["policy"] for r in results]
    rows = [head]
    for label, key, fmt in TABLE_ROWS:
        rows.append([label] + [fmt.format(r[key]) for r in results])
    widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
    lines = [title] if title else []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[0]) if c == 0 else cell.rjust(widths[c])
                               for c, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
