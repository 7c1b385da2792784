"""Replay benchmark: the ITP traces through the real scheduler, every policy side by side.

    python bench/replay.py                                   # cluster01..08, all policies (~15-25 min)
    python bench/replay.py --clusters 05 --policies fifo,fifo-skip,default
    python bench/replay.py --max-jobs 300 --clusters 01      # a smoke run
    python bench/replay.py --restart-cost 0 --checkpoint-every 0   # free preemption, as Tiresias

Capacity per trace follows the traces README rule (8 × ceil(mean GPUs busy / 0.8 / 8), at
least the largest job); tenants come from job ids (docs/simulate.md). Preemptions cost 60 s
per restart plus the work since the last checkpoint (every 30 min) unless told otherwise.
Prints one table per trace, the published reference figures next to ours, and which of the
issue's targets the default policy meets. Writes bench/results/replay.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.replay import (DECLARED_LIMITS, OVERESTIMATE, POLICIES, Restart, default_capacity,  # noqa: E402
                              floors, load, run, summarize, table)
from scheduler.replay.guarantee import GuaranteeWatch  # noqa: E402
from traitlets import TraitError  # noqa: E402

from scheduler import EngineConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ALL_POLICIES = "fifo,fifo-skip,sjf,srtf,las,default,default-age"
# Average JCT in hours from the issue: Tiresias' simulator and the Alibaba cluster-trace-gpu-v2020
# simulator on these traces at these capacities (preemption free; None = not published).
REFERENCE = {
    "cluster01": {"fifo": 40.0, "fifo-skip": 26.4, "sjf": 7.5, "srtf": 6.3, "las": 8.3},
    "cluster02": {"fifo": 77.0, "fifo-skip": 15.2, "sjf": 10.7, "srtf": 7.6, "las": 8.3},
    "cluster03": {"fifo": 56.3, "fifo-skip": 47.1, "sjf": 16.4, "srtf": 11.5, "las": 23.3},
    "cluster04": {"fifo": 7.1, "fifo-skip": None, "sjf": None, "srtf": 5.7, "las": 6.0},
    "cluster05": {"fifo": 66.7, "fifo-skip": 45.1, "sjf": 24.6, "srtf": 22.1, "las": 52.8},
    "cluster06": {"fifo": 42.8, "fifo-skip": 18.7, "sjf": 13.9, "srtf": 9.2, "las": 14.3},
    "cluster07": {"fifo": 9.2, "fifo-skip": None, "sjf": None, "srtf": 7.5, "las": 7.8},
    "cluster08": {"fifo": 9.9, "fifo-skip": 9.8, "sjf": 7.8, "srtf": 5.2, "las": 6.2},
}
SRTF_SLACK = 1.5


def find_traces(arg: str | None) -> Path:
    base = Path(arg or os.environ.get("COMPUTEHUB_TRACES") or ROOT.parent / "shared" / "traces")
    for d in (base / "itp", base):
        if list(d.glob("cluster*.csv")):
            return d
    sys.exit(f"bench/replay.py: no cluster*.csv traces under {base} (use --traces DIR or COMPUTEHUB_TRACES)")


def engine_settings(pairs: list[str], option: str = "--engine") -> dict:
    """``["swap_loss=inf", ...]`` as EngineConfig values, checked by the traits themselves
    (``option``: the command-line option they came from, for the error)."""
    traits = EngineConfig.class_traits(config=True)
    traits.pop("release_on_preempt")        # replay stops victims at once, always
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or name not in traits:
            raise ValueError(f"{option} expects SETTING=VALUE with one of {', '.join(sorted(traits))}; "
                             f"not {pair!r}")
        try:
            out[name] = traits[name].from_string(text.strip())
            EngineConfig(**{name: out[name]})
        except (TraitError, ValueError) as e:
            raise ValueError(f"{option} {pair}: {e}") from None
    return out


def replay(jobs, cap: int, policy: str, args) -> dict:
    watch = GuaranteeWatch()
    out = run(jobs, cap, policy, n_teams=args.teams, declared_limits=args.declared_limits,
              restart=Restart(args.restart_cost, args.checkpoint_every), overestimate=args.overestimate,
              after_cycle=watch, engine=getattr(args, "engine", None))
    m = summarize(out)
    m.update(watch.finish(max(r.finish for r in out.records)))
    m["declared_limits"] = out.declared_limits
    return m


JUDGED = ("default", "default-age")     # the ComputeHub policies the targets apply to


def targets(results: dict[str, dict], ref: dict, policy: str = "default") -> list[tuple[str, bool, str]]:
    """The issue's targets for a ComputeHub policy: (what, met?, numbers)."""
    d = results.get(policy)
    if d is None:
        return []
    h = lambda p: results[p]["jct_avg_h"] if p in results else None   # noqa: E731
    out = []
    blind = [x for x in (h("fifo-skip"), h("las")) if x is not None]
    if blind:
        best = min(blind)
        out.append(("avg JCT ≤ best duration-blind policy (ours: min of fifo-skip, las)", d["jct_avg_h"] <= best,
                    f"{d['jct_avg_h']:.2f} vs {best:.2f} h"))
    pub = [x for x in (ref.get("fifo-skip"), ref.get("las")) if x is not None]
    if pub:
        out.append(("avg JCT ≤ best duration-blind policy (published)", d["jct_avg_h"] <= min(pub),
                    f"{d['jct_avg_h']:.2f} vs {min(pub):.2f} h"))
    if h("srtf") is not None:
        out.append((f"avg JCT ≤ {SRTF_SLACK}× oracle shortest-remaining (ours)",
                    d["jct_avg_h"] <= SRTF_SLACK * h("srtf"), f"{d['jct_avg_h']:.2f} vs {SRTF_SLACK * h('srtf'):.2f} h"))
    if ref.get("srtf") is not None:
        out.append((f"avg JCT ≤ {SRTF_SLACK}× oracle shortest-remaining (published)",
                    d["jct_avg_h"] <= SRTF_SLACK * ref["srtf"], f"{d['jct_avg_h']:.2f} vs {SRTF_SLACK * ref['srtf']:.2f} h"))
    if "fifo-skip" in results:
        p = results["fifo-skip"]["jct_p99_h"]
        out.append(("p99 JCT ≤ FIFO + skip-ahead", d["jct_p99_h"] <= p, f"{d['jct_p99_h']:.2f} vs {p:.2f} h"))
    if "fifo" in results:
        u = results["fifo"]["gpu_utilisation"]
        out.append(("GPU utilisation ≥ FIFO's", d["gpu_utilisation"] >= u - 1e-9,
                    f"{d['gpu_utilisation']:.1%} vs {u:.1%}; useful {d['gpu_useful_utilisation']:.1%}, "
                    "without the GPU time preemption wasted"))
    out.append(("no guarantee violated (owed and reclaimable wait ≤ preempt_after + 60 s)",
                d["guarantee_violations"] == 0,
                f"{d['guarantee_violations']} violations, longest reclaimable wait {d['guarantee_max_wait_s']:.0f} s; "
                f"longest owed wait {d['owed_max_wait_s'] / 3600:.1f} h (incl. fragmentation)"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", help="folder with the traces (default: $COMPUTEHUB_TRACES or ../shared/traces)")
    ap.add_argument("--clusters", default="01,02,03,04,05,06,07,08", help="comma-separated cluster numbers")
    ap.add_argument("--policies", default=ALL_POLICIES, help=f"comma-separated, FIFO always included ({ALL_POLICIES})")
    ap.add_argument("--teams", type=int, default=4, help="tenant teams derived from job ids")
    ap.add_argument("--declared-limits", default="policy", choices=DECLARED_LIMITS,
                    help="'policy': oracle for sjf/srtf, estimates for default, none for the rest")
    ap.add_argument("--overestimate", type=float, default=OVERESTIMATE,
                    help="declared limit = duration × a per-job factor uniform in [1, this]")
    ap.add_argument("--restart-cost", type=float, default=60.0, help="seconds each restart after a preemption costs")
    ap.add_argument("--checkpoint-every", type=float, default=1800.0,
                    help="seconds of progress between checkpoints (work since the last one is lost); 0 = none lost")
    ap.add_argument("--max-jobs", type=int, default=0, help="replay only the first N jobs of each trace")
    ap.add_argument("--engine", action="append", default=[], metavar="SETTING=VALUE",
                    help="override a setting of the ComputeHub policies (an EngineConfig trait, see "
                         "scheduler/config.py), e.g. swap_loss=inf oversize_reservation_stretch=0; repeatable")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / "replay.json"), help="where to write results")
    args = ap.parse_args(argv)
    try:
        args.engine = engine_settings(args.engine)
    except ValueError as e:
        ap.error(str(e))
    folder = find_traces(args.traces)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r} (choose from {', '.join(POLICIES)})")
    if "fifo" not in policies:
        policies.insert(0, "fifo")
    everything: dict[str, dict] = {}
    for c in [c.strip() for c in args.clusters.split(",") if c.strip()]:
        path = folder / f"cluster{c}.csv"
        if not path.is_file():
            sys.exit(f"bench/replay.py: no trace {path.name} in {folder}")
        jobs = load(path, n_teams=args.teams, limit=args.max_jobs or None)
        cap = default_capacity(jobs)
        results = {p: replay(jobs, cap, p, args) for p in policies}
        ref = REFERENCE.get(path.stem, {}) if not args.max_jobs else {}
        cost = Restart(args.restart_cost, args.checkpoint_every).describe()
        floor = floors(jobs, cap)
        print(table(list(results.values()), title=f"\n{path.stem}: {len(jobs)} jobs, {cap} GPUs, {args.teams} "
                                                   f"teams; preemption cost: {cost}"), flush=True)
        print(f"no policy can beat: p99 JCT {floor['jct_p99_floor_h']:.2f} h (the p99 duration), "
              f"makespan {floor['makespan_floor_h']:.1f} h")
        print("published avg JCT (h)    " + "  ".join(
            f"{p}={ref[p]:.1f}" if ref.get(p) is not None else f"{p}=—" for p in policies if p in ref))
        judged = {}
        for p in JUDGED:
            checks = targets(results, ref, p)
            for what, ok, numbers in checks:
                print(f"  {p}: target {'met   ' if ok else 'MISSED'} {what}: {numbers}")
            judged[p] = [{"target": w, "met": ok, "numbers": n} for w, ok, n in checks]
        everything[path.stem] = {"jobs": len(jobs), "capacity_gpus": cap, "restart_cost": cost, "floors": floor,
                                 "results": results, "reference_avg_jct_h": ref, "targets": judged}
    print(summary(everything, policies))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(everything, indent=1, default=lambda o: None))
    print(f"\nresults: {out}")
    return 0


def summary(everything: dict, policies: list[str]) -> str:
    """Average JCT (h) per trace and policy, ours / published, and the default's targets."""
    judged = [p for p in JUDGED if p in policies]
    head = ["trace (GPUs)"] + policies + [f"{p} targets" for p in judged]
    rows = [head]
    for name, e in everything.items():
        row = [f"{name} ({e['capacity_gpus']})"]
        for p in policies:
            ours = e["results"][p]["jct_avg_h"]
            ref = e["reference_avg_jct_h"].get(p)
            row.append(f"{ours:.1f}" + (f" / {ref:.1f}" if ref is not None else ""))
        for p in judged:
            met = [t["met"] for t in e["targets"].get(p, [])]
            row.append(f"{sum(met)}/{len(met)} met")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["\nAverage JCT in hours, ours / published (published: preemption free)"]
    for n, r in enumerate(rows):
        lines.append("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
