"""Robustness grid: the replay's targets for the default policy under several team splits and
over-estimate factors at once, and side by side with a variant (engine settings changed).

    python bench/replay_grid.py                                  # 8 traces × 5 settings (~7 min on 2 cores)
    python bench/replay_grid.py --variant swap_loss=inf          # the default and the variant, side by side
    python bench/replay_grid.py --settings 4:3,5:3 --clusters 03,05 --variant preempt_for_shorter=0

A setting is TEAMS:FACTOR: the tenant teams derived from the job ids, and declared run-time
limits up to FACTOR × the true duration (bench/replay.py's --teams and --overestimate). The
reference policies (fifo, fifo-skip, srtf, las) run one queue and declare no limits (srtf
knows the true durations), so neither changes them: each is replayed once per trace and
serves every setting. The checks per trace and setting are the issue's, against our own
reference runs: average JCT no higher than the best duration-blind policy and within 1.5× of
SRTF, p99 JCT no worse than FIFO + skip-ahead, utilisation not below FIFO's, no guarantee
violated. A single target can move by chance under any change (one job ending last sets a
makespan), which is why changes to the default are judged on the whole grid. Writes
bench/results/replay_grid.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay as R  # noqa: E402

REFERENCES = ("fifo", "fifo-skip", "srtf", "las")
DEFAULT_SETTINGS = "4:3,3:3,5:3,4:2,4:4"        # the benchmark's own setting first
KEPT = ("jct_avg_h", "jct_p99_h", "gpu_utilisation", "gpu_useful_utilisation", "guarantee_violations",
        "guarantee_max_wait_s", "owed_max_wait_s", "preemptions", "lost_gpu_h", "makespan_h", "jobs")


def parse_settings(text: str) -> list[tuple[int, float]]:
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        teams, sep, factor = part.partition(":")
        try:
            t, f = int(teams), float(factor)
        except ValueError:
            t, f = 0, 0.0
        if not sep or t < 1 or f < 1:
            raise ValueError(f"--settings expects TEAMS:FACTOR pairs (teams ≥ 1, factor ≥ 1) such as 4:3; "
                             f"not {part!r}")
        out.append((t, f))
    if not out:
        raise ValueError("--settings names no setting")
    return out


@lru_cache(maxsize=4)
def _trace(path: str, teams: int, limit: int):
    jobs = R.load(Path(path), n_teams=teams, limit=limit or None)
    return jobs, R.default_capacity(jobs)


def one(task: dict) -> dict:
    """Replay one (trace, policy, setting, engine): the metrics the checks and tables use."""
    jobs, cap = _trace(task["path"], task["teams"], task["max_jobs"])
    args = types.SimpleNamespace(teams=task["teams"], declared_limits="policy", restart_cost=task["restart_cost"],
                                 checkpoint_every=task["checkpoint_every"], overestimate=task["factor"],
                                 engine=task["engine"] or None)
    m = R.replay(jobs, cap, task["policy"], args)
    return {**{k: m[k] for k in KEPT if k in m}, "capacity_gpus": cap}


def checks(refs: dict, m: dict) -> list[tuple[str, bool, str]]:
    return R.targets({**refs, "default": m}, {}, "default")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", help="folder with the traces (default: $COMPUTEHUB_TRACES or ../shared/traces)")
    ap.add_argument("--clusters", default="01,02,03,04,05,06,07,08", help="comma-separated cluster numbers")
    ap.add_argument("--settings", default=DEFAULT_SETTINGS,
                    help="comma-separated TEAMS:FACTOR pairs: teams from the job ids, declared limits up to "
                         f"FACTOR × the true duration (default {DEFAULT_SETTINGS})")
    ap.add_argument("--variant", action="append", default=[], metavar="SETTING=VALUE",
                    help="also replay the default with this EngineConfig setting changed (scheduler/config.py), "
                         "side by side; repeatable, all apply together")
    ap.add_argument("--restart-cost", type=float, default=60.0, help="seconds each restart after a preemption costs")
    ap.add_argument("--checkpoint-every", type=float, default=1800.0,
                    help="seconds of progress between checkpoints (work since the last one is lost); 0 = none lost")
    ap.add_argument("--max-jobs", type=int, default=0, help="replay only the first N jobs of each trace")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="replays run at once (processes)")
    ap.add_argument("--json", metavar="FILE", default=str(R.RESULTS / "replay_grid.json"), help="where to write results")
    args = ap.parse_args(argv)
    try:
        settings = parse_settings(args.settings)
        variant = R.engine_settings(args.variant, "--variant")
    except ValueError as e:
        ap.error(str(e))
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    folder = R.find_traces(args.traces)
    paths = {}
    for c in [c.strip() for c in args.clusters.split(",") if c.strip()]:
        path = folder / f"cluster{c}.csv"
        if not path.is_file():
            sys.exit(f"bench/replay_grid.py: no trace {path.name} in {folder}")
        paths[path.stem] = path
    arms = {"default": {}, **({"variant": variant} if variant else {})}
    common = {"restart_cost": args.restart_cost, "checkpoint_every": args.checkpoint_every, "max_jobs": args.max_jobs}
    tasks = [{"trace": name, "path": str(p), "policy": pol, "teams": 4, "factor": 3.0, "engine": {}, "arm": "ref",
              **common} for name, p in paths.items() for pol in REFERENCES]
    tasks += [{"trace": name, "path": str(p), "policy": "default", "teams": t, "factor": f, "engine": eng,
               "arm": arm, **common}
              for name, p in paths.items() for t, f in settings for arm, eng in arms.items()]
    # The largest traces first, so that the pool does not end waiting on one long replay.
    tasks.sort(key=lambda x: -os.path.getsize(x["path"]))
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(one, tasks))
    wall = time.perf_counter() - started
    refs: dict[str, dict] = {}
    runs: dict[tuple, dict] = {}
    for task, m in zip(tasks, rows):
        if task["arm"] == "ref":
            refs.setdefault(task["trace"], {})[task["policy"]] = m
        else:
            runs[(task["arm"], task["teams"], task["factor"], task["trace"])] = m
    result = grid(paths, settings, arms, refs, runs)
    print(report(result, settings, arms, variant, wall))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": [f"{t}:{f:g}" for t, f in settings], "variant": variant,
                               "wall_seconds": wall, **result}, indent=1, default=lambda o: None))
    print(f"\nresults: {out}")
    return 0


def grid(paths, settings, arms, refs, runs) -> dict:
    """Per arm and setting: checks met, misses and violations, with every trace's figures."""
    out = {"references": refs, "arms": {}}
    for arm in arms:
        per = {}
        for t, f in settings:
            traces, met, total, viol, missed = {}, 0, 0, 0, []
            for name in paths:
                m = runs[(arm, t, f, name)]
                cs = checks(refs[name], m)
                met += sum(ok for _, ok, _ in cs)
                total += len(cs)
                viol += m["guarantee_violations"]
                missed += [f"{name[-2:]} {what.split(' (')[0]} ({numbers.split(';')[0]})" for what, ok, numbers in cs
                           if not ok]
                traces[name] = {**m, "checks": [{"target": w, "met": ok, "numbers": n} for w, ok, n in cs]}
            per[f"{t}:{f:g}"] = {"met": met, "checks": total, "violations": viol, "missed": missed, "traces": traces}
        out["arms"][arm] = per
    return out


def report(result: dict, settings, arms, variant: dict, wall: float) -> str:
    lines = [f"\nChecks met per setting (TEAMS:FACTOR; {wall / 60:.1f} min wall)"]
    for arm in arms:
        name = "default" if arm == "default" else "variant " + " ".join(f"{k}={v}" for k, v in variant.items())
        cells = [f"{s}: {r['met']}/{r['checks']}, {r['violations']} violations"
                 for s, r in result["arms"][arm].items()]
        total = sum(r["met"] for r in result["arms"][arm].values())
        lines.append(f"  {name}: {total} in all — " + "; ".join(cells))
        for s, r in result["arms"][arm].items():
            if r["missed"]:
                lines.append(f"    {s} missed: " + "; ".join(r["missed"]))
    if "variant" in arms:
        lines.append("\nVariant / default, over every trace and setting (median and range of the ratios)")
        base, var = result["arms"]["default"], result["arms"]["variant"]
        pairs = [(base[s]["traces"][n], var[s]["traces"][n]) for s in base for n in base[s]["traces"]]
        for key, label in (("jct_avg_h", "average JCT"), ("jct_p99_h", "p99 JCT"),
                           ("gpu_utilisation", "GPU utilisation"), ("preemptions", "preemptions"),
                           ("lost_gpu_h", "GPU-h lost to preemption")):
            ratios = [v[key] / d[key] for d, v in pairs if d[key]]
            if ratios:
                lines.append(f"  {label:26s} median {statistics.median(ratios):.3f}  "
                             f"[{min(ratios):.3f} – {max(ratios):.3f}]")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
