"""What the in-process benchmarks of one long line share (bench/what_if.py, bench/loop_lag.py):
bench/scale.py's cluster and workload mix (8 teams, quotas and fair share on) with ``pending``
workloads waiting after a few cycles of churn, and their command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from results_file import machine, save
from scale import Workbench

RESULTS = Path(__file__).resolve().parent / "results"


def churned(nodes: int, pending: int) -> Workbench:
    wb = Workbench(nodes)
    wb.submit(pending + nodes * 8)          # enough to fill the cluster and leave `pending` waiting
    for _ in range(3):
        wb.cycle()
        wb.churn(0.05, pending)
    wb.cycle()
    return wb


def main(script: str, doc: str, measure, report, argv=None) -> int:
    """``--nodes``, ``--pending``, ``--repeat`` and ``--json``; ``measure(nodes, pending, repeat)``
    gives the results, ``report(results)`` their table."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="eight-GPU nodes")
    ap.add_argument("--pending", type=int, default=10000, help="workloads waiting")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each way per job (medians shown)")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / f"{script}.json"))
    args = ap.parse_args(argv)
    if args.nodes < 1 or args.pending < 10 or args.repeat < 1:
        raise SystemExit(f"bench/{script}.py: --nodes at least 1, --pending at least 10, --repeat at least 1")
    results = {"machine": machine(), **measure(args.nodes, args.pending, args.repeat)}
    print(report(results))
    save(results, args.json)
    return 0
