"""Markdown tables from bench/results/*.json, for bench/README.md.

    python bench/tables.py            # every result file present
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
POLICY_ORDER = ["fifo", "fifo-skip", "sjf", "srtf", "las", "default", "default-age"]


def md(rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def replay(data: dict) -> str:
    parts = []
    head = ["trace (GPUs)"] + [p for p in POLICY_ORDER if any(p in e["results"] for e in data.values())]
    rows = [head]
    for name, e in data.items():
        row = [f"{name} ({e['capacity_gpus']})"]
        for p in head[1:]:
            r = e["results"].get(p)
            ref = e["reference_avg_jct_h"].get(p)
            row.append("—" if r is None else f"{r['jct_avg_h']:.1f}" + (f" ({ref:.1f})" if ref is not None else ""))
        rows.append(row)
    parts.append("Average JCT in hours, ours (published, preemption free):\n\n" + md(rows))
    parts.append(target_matrix(data))
    for name, e in data.items():
        res = [e["results"][p] for p in POLICY_ORDER if p in e["results"]]
        t = [["metric"] + [r["policy"] for r in res]]
        for label, key, fmt in (("avg / median / p99 JCT (h)", None, None), ("avg / p99 queueing (h)", None, None),
                                ("makespan (h)", "makespan_h", "{:.0f}"), ("GPU utilisation", "gpu_utilisation", "{:.1%}"),
                                ("useful GPU utilisation", "gpu_useful_utilisation", "{:.1%}"),
                                ("preemptions", "preemptions", "{:d}"),
                                ("jobs preempted / most times one job", None, None),
                                ("GPU-h lost to preemption", "lost_gpu_h", "{:.0f}"),
                                ("Jain (teams, slowdown)", "jain_fairness", "{:.3f}")):
            if label.startswith("avg / median"):
                t.append([label] + [f"{r['jct_avg_h']:.1f} / {r['jct_median_h']:.1f} / {r['jct_p99_h']:.0f}" for r in res])
            elif label.startswith("avg / p99 q"):
                t.append([label] + [f"{r['queue_avg_h']:.1f} / {r['queue_p99_h']:.0f}" for r in res])
            elif label.startswith("jobs preempted"):     # results from before 2026-12-04 lack it
                t.append([label] + [f"{r['preempted_jobs']} / {r['max_preemptions']}" if "max_preemptions" in r
                                    else "—" for r in res])
            else:       # results from before 2026-12-05 (late night) lack useful utilisation
                t.append([label] + [fmt.format(r[key]) if key in r else "—" for r in res])
        targets = e["targets"]
        lines = []
        for p, checks in targets.items():
            missed = [c["target"] + f" ({c['numbers']})" for c in checks if not c["met"]]
            lines.append(f"* `{p}`: {sum(c['met'] for c in checks)}/{len(checks)} targets met"
                         + ("; missed: " + "; ".join(missed) if missed else ""))
        floor = e.get("floors")         # results from before 2026-12-06 lack them
        bound = (f"; no policy can beat a p99 JCT of {floor['jct_p99_floor_h']:.1f} h (the p99 duration) or a "
                 f"makespan of {floor['makespan_floor_h']:.0f} h" if floor else "")
        parts.append(f"**{name}**: {e['jobs']} jobs, {e['capacity_gpus']} GPUs{bound}\n\n" + md(t) + "\n\n"
                     + "\n".join(lines))
    return "\n\n".join(parts)


def target_matrix(data: dict) -> str:
    """One row per trace and judged policy, one column per target of the issue: met or MISSED."""
    first = next(iter(data.values()))["targets"]
    names = [c["target"] for c in next(iter(first.values()))]
    rows = [["trace", "policy"] + names]
    met = total = 0
    for name, e in data.items():
        for p, checks in e["targets"].items():
            rows.append([name, p] + ["met" if c["met"] else "**MISSED**" for c in checks])
            if p == "default":
                met += sum(c["met"] for c in checks)
                total += len(checks)
    return f"Targets met by `default`: {met} of {total}.\n\n" + md(rows)


def scale(data: dict) -> str:
    rows = [["nodes", "pending", "median ms", "p95 ms", "admissions/s", "peak MB", "exponent"]]
    for r in data["rows"]:
        rows.append([f"{r['nodes']:,}", f"{r['pending']:,}", f"{r['median_ms']:.0f}", f"{r['p95_ms']:.0f}",
                     f"{r['admissions_per_s']:.0f}", f"{r['peak_rss_mb']:.0f}",
                     f"{r['growth_exponent']:.2f}" if r.get("growth_exponent") is not None else "—"])
    return md(rows)


def slurm(data: dict) -> str:
    rows = [["phase", "system", "subm/s", "started/s", "all done (s)", "scheduler CPU s", "agents CPU s",
             "failed"]]
    for name, ph in data["phases"].items():
        for system in ("slurm", "computehub"):
            r = ph.get(system)
            if r:
                rows.append([name, system, f"{r['submit_rate']:.0f}", f"{r['start_rate']:.0f}",
                             f"{r['all_done_s']:.1f}", f"{r['scheduler_cpu_s']:.1f}", f"{r['agents_cpu_s']:.1f}",
                             str(r["failed"] + r["submit_errors"])])
        s, c = ph.get("slurm"), ph.get("computehub")
        if s and c:
            rows.append([name, "ratio", f"{c['submit_rate'] / s['submit_rate']:.2f}×",
                         f"{c['start_rate'] / s['start_rate']:.2f}×" if s["start_rate"] else "—",
                         f"{s['all_done_s'] / c['all_done_s']:.2f}×", "", "", ""])
    return md(rows)


def main() -> int:
    for name, fn in (("replay", replay), ("scale", scale), ("slurm", slurm)):
        f = RESULTS / f"{name}.json"
        if f.exists():
            print(f"## {name}\n\n{fn(json.loads(f.read_text()))}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
