"""Replay benchmark: the ITP traces through the real scheduler, FIFO next to ComputeHub's default.

    python bench/replay.py                      # cluster01..08, fifo and default
    python bench/replay.py --clusters 05 --policies fifo,fifo-skip,sjf,default
    python bench/replay.py --traces PATH --max-jobs 500    # smoke run

Capacity per trace follows the traces README rule (8 × ceil(mean GPUs busy / 0.8 / 8),
at least the largest job); tenants come from job ids (see docs/simulate.md). Prints one
table per trace, a summary, and whether the cluster04 replay meets its time target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.replay import POLICIES, default_capacity, load, simulate, table  # noqa: E402

TARGET_CLUSTER04_S = 60.0


def find_traces(arg: str | None) -> Path:
    base = Path(arg) if arg else ROOT.parent / "shared" / "traces"
    for d in (base / "itp", base):
        if (d / "cluster01.csv").is_file() or list(d.glob("cluster*.csv")):
            return d
    sys.exit(f"bench/replay.py: no cluster*.csv traces under {base} (use --traces DIR)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", help="folder with the traces (default: ../shared/traces from the repo root)")
    ap.add_argument("--clusters", default="01,02,03,04,05,06,07,08", help="comma-separated cluster numbers")
    ap.add_argument("--policies", default="fifo,default",
                    help=f"comma-separated policies, fifo first ({', '.join(POLICIES)})")
    ap.add_argument("--teams", type=int, default=4, help="tenant teams derived from job ids")
    ap.add_argument("--declared-limits", default="oracle", choices=("oracle", "none"))
    ap.add_argument("--max-jobs", type=int, default=0, help="replay only the first N jobs of each trace")
    ap.add_argument("--json", metavar="FILE", help="also write every result to FILE as JSON")
    args = ap.parse_args(argv)
    folder = find_traces(args.traces)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r}")
    if "fifo" not in policies:
        policies.insert(0, "fifo")          # FIFO is always the baseline
    all_results: dict[str, list[dict]] = {}
    for c in [c.strip() for c in args.clusters.split(",") if c.strip()]:
        path = folder / f"cluster{c}.csv"
        jobs = load(path, n_teams=args.teams, limit=args.max_jobs or None)
        cap = default_capacity(jobs)
        results = []
        for p in policies:
            results.append(simulate(jobs, cap, p, n_teams=args.teams, declared_limits=args.declared_limits))
        all_results[path.stem] = results
        print(table(results, title=f"\n{path.stem}: {len(jobs)} jobs, {cap} GPUs, {args.teams} teams, "
                                   f"declared limits {args.declared_limits}"), flush=True)
    print("\nSummary (JCT in hours; speed-up = FIFO avg JCT / policy avg JCT)")
    head = ["trace", "jobs", "GPUs", "policy", "avg JCT", "p99 JCT", "avg wait", "util", "preempt",
            "Jain", "speed-up", "wall s"]
    rows = [head]
    for name, results in all_results.items():
        base = results[0]["jct_avg_s"]
        for r in results:
            rows.append([name, str(r["jobs"]), str(r["capacity_gpus"]), r["policy"], f"{r['jct_avg_h']:.2f}",
                         f"{r['jct_p99_h']:.2f}", f"{r['queue_avg_h']:.2f}", f"{r['gpu_utilisation']:.1%}",
                         str(r["preemptions"]), f"{r['jain_fairness']:.3f}", f"{base / r['jct_avg_s']:.2f}",
                         f"{r['wall_seconds']:.1f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for n, r in enumerate(rows):
        print("  ".join(x.ljust(w) if i in (0, 3) else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    if "cluster04" in all_results and not args.max_jobs:
        for r in all_results["cluster04"]:
            ok = r["wall_seconds"] <= TARGET_CLUSTER04_S
            print(f"cluster04 {r['policy']}: replay took {r['wall_seconds']:.1f} s "
                  f"(target ≤ {TARGET_CLUSTER04_S:.0f} s: {'met' if ok else 'MISSED'}); "
                  f"{r['cycles']} cycles, {r['cycle_seconds']:.1f} s inside cycle()")
    if args.json:
        Path(args.json).write_text(json.dumps(all_results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
