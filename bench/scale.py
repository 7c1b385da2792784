"""Scale benchmark: how long one scheduling cycle takes with many pending workloads.

    python bench/scale.py                        # 100, 1,000, 5,000 nodes × 1k, 10k, 50k pending (~15 min)
    python bench/scale.py --quick                # 100, 1,000 nodes × 1k, 10k pending (~1 min)
    python bench/scale.py --nodes 1000 --pending 10000 --cycles 30
    python bench/scale.py --nodes 1000 --pending 10000 --profile   # where the time goes

Each configuration runs in its own child process (so its peak memory is its own) and
drives the real ``Scheduler`` facade (in-memory store, no events): 8 team queues under
one organisation with equal GPU guarantees and a limit of half the cluster each, fair
share on (the default engine configuration), three priority
classes (notebooks inside guarantee, training, preemptible batch), requests of
1/2/4/8 GPUs and some gangs of 2 or 4 whole nodes, with declared run-time limits.

1. Admissions: from an empty cluster with enough pending work to fill it and N more
   waiting, cycles run until the cluster is full; admissions per second = workloads
   admitted / time spent in ``cycle()``.
2. Steady state: the cluster stays full with about N pending; between cycles some
   running work finishes (and preemption victims stop) and new work arrives, so each
   cycle admits some. Only ``cycle()`` is timed; the median of the cycles is reported.

With ``--arrays F`` a share F of the submissions are job arrays of ``ARRAY_TASKS`` tasks, at
most ``ARRAY_CAP`` of each running at a time (``scheduler/arrays.py``): what the cap rule costs.

Peak memory is the child's maximum resident set size (``getrusage``). The growth
exponent is the least-squares slope of log(median cycle) over log(pending) per node count
(n·log n between 1k and 50k pending fits an exponent of about 1.2).

Target (issue): median cycle ≤ 100 ms with 10,000 pending on 1,000 nodes, growing no
faster than n·log n in the number pending. Writes bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler import EngineConfig, MemoryStore, Scheduler  # noqa: E402
from scheduler.model import PREEMPTING  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TEAMS = 8
USERS_PER_TEAM = 10
TARGET_MS = 100.0
# (weight, kind, gpus per worker, workers)
MIX = [
    (30, "training", 1, 1), (15, "training", 2, 1), (12, "training", 4, 1), (10, "training", 8, 1),
    (4, "training", 8, 2), (1, "training", 8, 4),
    (12, "batch", 1, 1), (6, "batch", 2, 1), (4, "batch", 4, 1),
    (6, "notebook", 1, 1),
]


ARRAY_TASKS, ARRAY_CAP = 20, 4       # --arrays: each array's tasks, and how many may run at a time


class Workbench:
    def __init__(self, nodes: int, seed: int = 1, arrays: float = 0.0):
        self.rng = random.Random(seed)
        self.arrays = arrays
        self.now = 0.0
        self.sched = Scheduler(MemoryStore(keep_events=False), EngineConfig(), clock=lambda: self.now)
        for i in range(nodes):
            self.sched.put_node({"name": f"n{i:05d}", "gpus": 8, "cpu": 128, "memory": "1Ti"}, now=0)
        gpus = nodes * 8
        self.sched.put_queue({"name": "org"}, now=0)
        for t in range(TEAMS):
            self.sched.put_queue({"name": f"team-{t}", "parent": "org", "guaranteed": {"gpu": gpus // TEAMS},
                                  "limit": {"gpu": max(gpus // 2, 32)}}, now=0)   # at least the largest gang
        self.weights = [m[0] for m in MIX]

    def submit(self, n: int) -> None:
        rng, s = self.rng, self.sched
        if not self.arrays:             # the mix drawn at once, as before --arrays (the same stream)
            for kind, g, workers in (m[1:] for m in rng.choices(MIX, self.weights, k=n)):
                s.submit(self._spec(kind, g, workers), now=self.now)
            return
        while n > 0:
            kind, g, workers = rng.choices(MIX, self.weights)[0][1:]
            spec = self._spec(kind, g, workers)
            if kind != "notebook" and workers == 1 and rng.random() < self.arrays:
                spec["array"] = f"0-{ARRAY_TASKS - 1}%{ARRAY_CAP}"
            n -= ARRAY_TASKS if "array" in spec else 1
            s.submit(spec, now=self.now)

    def _spec(self, kind: str, g: int, workers: int) -> dict:
        rng = self.rng
        team = rng.randrange(TEAMS)
        spec = {"user": f"u{team}-{rng.randrange(USERS_PER_TEAM)}", "queue": f"team-{team}", "kind": kind,
                "resources": {"gpu": g, "cpu": 8 * g, "memory": f"{64 * g}Gi"}, "workers": workers}
        if kind != "notebook":
            spec["time_limit"] = float(rng.randrange(1, 25) * 3600)
        return spec

    def cycle(self) -> tuple[float, int]:
        t0 = time.perf_counter()
        res = self.sched.cycle(self.now)
        return time.perf_counter() - t0, len(res.admitted)

    def churn(self, fraction: float, pending: int) -> None:
        """Between cycles: victims stop, some running work ends, new work arrives."""
        s = self.sched
        self.now += 60.0
        for w in [w for w in s.state.holding.values() if w.state == PREEMPTING]:
            s.mark_stopped(w.id, now=self.now)
        running = [w for w in s.state.holding.values() if w.state != PREEMPTING]
        for w in self.rng.sample(running, max(1, int(len(running) * fraction))):
            s.mark_finished(w.id, now=self.now)
        missing = pending - len(s.state.pending)
        if missing > 0:
            self.submit(missing)


def measure(nodes: int, pending: int, cycles: int, churn: float, profile: bool = False,
            arrays: float = 0.0) -> dict:
    wb = Workbench(nodes, arrays=arrays)
    fill = int(nodes * 8 / 3.2)               # about enough work to fill the cluster (mean ≈ 3.2 GPUs)
    t0 = time.perf_counter()
    wb.submit(fill + pending)
    build_s = time.perf_counter() - t0
    # 1. From empty to full.
    admitted, spent, fill_cycles = 0, 0.0, 0
    while True:
        dt, n = wb.cycle()
        spent += dt
        fill_cycles += 1
        admitted += n
        if n == 0 or fill_cycles >= 50:
            break
        wb.now += 1.0
    wb.now = 3600.0                             # past preempt_after: reclaim is possible
    used = wb.sched.state.inventory
    full = 1 - used.free.get("gpu", 0) / used.capacity["gpu"]
    # 2. Steady state.
    wb.churn(churn, pending)
    times, adm = [], []
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
    for _ in range(cycles):
        if prof:
            prof.enable()
        dt, n = wb.cycle()
        if prof:
            prof.disable()
        times.append(dt)
        adm.append(n)
        wb.churn(churn, pending)
    if prof:
        import pstats
        pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    return {"nodes": nodes, "pending": pending, "arrays": arrays, "build_s": build_s, "fill_admitted": admitted,
            "fill_cycles": fill_cycles, "fill_s": spent, "admissions_per_s": admitted / spent if spent else 0.0,
            "full": full, "median_ms": statistics.median(times) * 1000, "p95_ms": _pct(times, 95) * 1000,
            "admitted_per_cycle": statistics.mean(adm), "pending_after": len(wb.sched.state.pending),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def isolated(nodes: int, pending: int, cycles: int, churn: float, arrays: float = 0.0) -> dict:
    """``measure`` in a fresh child process, so that peak memory is this configuration's."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(measure, (nodes, pending, cycles, churn, False, arrays))


def exponent(rows: list[dict]) -> float | None:
    """Least-squares slope of log(median ms) over log(pending)."""
    pts = [(math.log(r["pending"]), math.log(r["median_ms"])) for r in rows if r["median_ms"] > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="100,1000,5000", help="comma-separated node counts (8 GPUs each)")
    ap.add_argument("--pending", default="1000,10000,50000", help="comma-separated pending counts")
    ap.add_argument("--cycles", type=int, default=15, help="steady-state cycles per configuration")
    ap.add_argument("--churn", type=float, default=0.02, help="fraction of running work ending between cycles")
    ap.add_argument("--profile", action="store_true", help="cProfile the steady-state cycles")
    ap.add_argument("--arrays", type=float, default=0.0,
                    help=f"share of submissions that are job arrays ({ARRAY_TASKS} tasks, {ARRAY_CAP} at a time)")
    ap.add_argument("--quick", action="store_true", help="only 100 and 1,000 nodes × 1k and 10k pending")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / "scale.json"), help="where to write results")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.pending = "100,1000", "1000,10000"
    nodes = [int(x) for x in args.nodes.split(",")]
    pendings = [int(x) for x in args.pending.split(",")]
    rows = []
    head = (f"{'nodes':>6} {'pending':>8} {'median ms':>10} {'p95 ms':>8} {'adm/cycle':>9} "
            f"{'fill adm':>8} {'adm/s':>8} {'full':>6} {'peak MB':>8} {'build s':>8}")
    print(head)
    print("-" * len(head))
    for n in nodes:
        for p in pendings:
            r = measure(n, p, args.cycles, args.churn, True, args.arrays) if args.profile else \
                isolated(n, p, args.cycles, args.churn, args.arrays)
            rows.append(r)
            print(f"{r['nodes']:>6} {r['pending']:>8} {r['median_ms']:>10.1f} {r['p95_ms']:>8.1f} "
                  f"{r['admitted_per_cycle']:>9.1f} {r['fill_admitted']:>8} {r['admissions_per_s']:>8.0f} "
                  f"{r['full']:>6.1%} {r['peak_rss_mb']:>8.0f} {r['build_s']:>8.1f}", flush=True)
    print("\nGrowth with pending (measured ratio vs n·log n ratio):")
    for n in nodes:
        rs = sorted((r for r in rows if r["nodes"] == n), key=lambda r: r["pending"])
        for a, b in zip(rs, rs[1:]):
            nlogn = (b["pending"] * math.log(b["pending"])) / (a["pending"] * math.log(a["pending"]))
            got = b["median_ms"] / a["median_ms"]
            print(f"  {n:>5} nodes: {b['pending']:>6} vs {a['pending']:>6} pending: ×{got:.2f} "
                  f"(n·log n: ×{nlogn:.2f}) {'ok' if got <= nlogn * 1.1 else 'GROWS FASTER THAN n·log n'}")
        e = exponent(rs)
        if e is not None:
            print(f"  {n:>5} nodes: fitted exponent {e:.2f} (cycle time ∝ pending^{e:.2f})")
            for r in rs:
                r["growth_exponent"] = e
    for r in rows:
        if r["nodes"] == 1000 and r["pending"] == 10000:
            ok = r["median_ms"] <= TARGET_MS
            print(f"\nTarget: 10,000 pending on 1,000 nodes: median {r['median_ms']:.1f} ms "
                  f"(≤ {TARGET_MS:.0f} ms: {'met' if ok else 'MISSED'})")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "target_ms": TARGET_MS}, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
