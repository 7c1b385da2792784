"""End-to-end job throughput: Slurm and ComputeHub side by side on this machine.

    python bench/slurm.py                          # 2,000 jobs per phase, 3 runs each, both systems (~12 min)
    python bench/slurm.py --repeat 1 --jobs 300 --phases trivial:1,gpu:4
    python bench/slurm.py --only slurm

Slurm (Debian's slurm-wlm 22.05, installed with apt-get when missing) runs as munged +
slurmctld + 16 ``slurmd -N gpuNNN`` on 127.0.0.1, 8 GPUs each (bench/slurm_cluster.py).
ComputeHub runs as a real JupyterHub + proxy + the ComputeHub service + its local
launcher, 16 simulated 8-GPU nodes (bench/e2e_computehub.py). Both get the same job
stream per phase: N jobs running ``true``, needing 1 CPU ("trivial") or 1 GPU + 1 CPU
("gpu"), from 1 or 4 concurrent submitters (``sbatch --wrap true`` per job; REST
``POST /workloads`` through the hub's proxy with keep-alive connections); or ("array", opt-in:
``--phases array:1``) one job array of up to 1,000 trivial tasks, ``sbatch --array=0-999`` against
one ``POST /workloads`` with ``"array": "0-999"``.

Per phase: submissions/s (jobs / time until the last submission returned), jobs started/s
(jobs / (last start − first submission)), time until all are done (from the first
submission), and CPU seconds of the scheduler (slurmctld; the ComputeHub service) and of
the node agents (all slurmd + slurmstepd; the launcher and its jobs' wrapper). Slurm's
times come from jobcomp/filetxt (1-second resolution); ComputeHub's from the service's
timestamps. Each phase runs ``--repeat`` times on each system (one after another, the system
staying up) and the tables show the median of each figure; both systems' rates vary by up
to 2× between runs on a 2-core machine. Target (issue): ComputeHub ≥ 2× Slurm on
submissions/s and jobs started/s, judged on the medians. Writes bench/results/slurm.json
(the medians, and every run under ``runs``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from e2e_computehub import ComputeHubSide, cpu_seconds  # noqa: E402
from results_file import machine, save  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

RESULTS = HERE / "results"
TARGET = 2.0


def descendants_cpu(root_pids: list[int]) -> float:
    """CPU seconds of the given processes (and their waited-for children)."""
    return sum(cpu_seconds(p) for p in root_pids)


def slurm_phase(c: SlurmCluster, n: int, submitters: int, gpu: bool, tag: str, timeout: float = 600.0,
                array: bool = False) -> dict:
    pids = c.pids()
    ctld0 = cpu_seconds(pids["slurmctld"])
    agents0 = descendants_cpu([p for k, p in pids.items() if k != "slurmctld"])
    args = ["sbatch", "--parsable", "-J", tag, "-o", "/dev/null", "--wrap", "true"] + (["--gres=gpu:1"] if gpu else [])
    if array:               # one sbatch for all n: a job array
        args[1:1] = [f"--array=0-{n - 1}"]
    counter = iter(range(1 if array else n))
    lock = threading.Lock()
    errors = [0]

    def submitter():
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            r = subprocess.run(args, env=c.env, capture_output=True, text=True)
            if r.returncode != 0:
                with lock:
                    errors[0] += 1
                    if errors[0] <= 3:
                        print(f"  sbatch failed: {r.stderr.strip()[:300]}", flush=True)

    t0 = time.time()
    threads = [threading.Thread(target=submitter) for _ in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.time()
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = c.run("squeue", "-h", "-n", tag, "-o", "%i", check=False).stdout.split()
        if not left:
            break
        time.sleep(0.5)
    done_at = time.time()
    pids = c.pids()
    ctld = cpu_seconds(pids["slurmctld"]) - ctld0
    agents = descendants_cpu([p for k, p in pids.items() if k != "slurmctld"]) - agents0
    time.sleep(1.0)                                  # jobcomp lines are written as jobs end
    starts, ends, failed = [], [], 0
    comp = c.dir / "log" / "jobcomp.txt"
    for line in comp.read_text(errors="replace").splitlines() if comp.exists() else []:
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("Name") != tag:
            continue
        starts.append(_epoch(f["StartTime"]))
        ends.append(_epoch(f["EndTime"]))
        failed += f.get("JobState") != "COMPLETED"
    starts.sort()
    ends.sort()
    # Slurm's times have 1 s resolution: measure from the submission's start, rounded down.
    first = int(t0)
    return {"jobs": n, "submitters": submitters, "gpu": gpu, "submit_errors": errors[0], "failed": failed,
            "completed": len(ends), "submit_s": t1 - t0, "submit_rate": n / (t1 - t0),
            "first_start_s": (starts[0] - first) if starts else None,
            "start_rate": len(starts) / max(1.0, starts[-1] - first) if starts else 0.0,
            "all_done_s": (ends[-1] - first) if ends else done_at - t0,
            "scheduler_cpu_s": ctld, "agents_cpu_s": agents}


def median_of(runs: list[dict]) -> dict:
    """One phase's figures over its runs: the median of each, failures and errors summed."""
    out = dict(runs[0])
    for k, v in runs[0].items():
        if k in ("failed", "submit_errors"):
            out[k] = sum(r[k] for r in runs)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [r[k] for r in runs if r.get(k) is not None]
            out[k] = statistics.median(vals) if vals else None
    out["runs"] = runs
    return out


def run_phases(results: dict, system: str, scheduler: str, phases, repeat: int, run_one) -> None:
    """Each phase ``repeat`` times on one system (``run_one(submitters, gpu, tag)``), every
    run printed, the medians kept under ``results["phases"][name][system]``."""
    for kind, k in phases:
        name = f"{kind}-{k}sub"
        runs = []
        for i in range(repeat):
            r = run_one(k, kind, f"b{name}r{i}")
            runs.append(r)
            print(f"  {system} {name} run {i + 1}: {r['submit_rate']:.0f} subm/s, {r['start_rate']:.0f} "
                  f"started/s, all done {r['all_done_s']:.1f} s, {scheduler} {r['scheduler_cpu_s']:.1f} CPU s",
                  flush=True)
        results["phases"][name][system] = median_of(runs)


def jobs_of(kind: str, jobs: int) -> int:
    """Jobs in a phase: ``--jobs``; an array phase at most 1,000 (the tasks of one array, on both
    systems: ComputeHub's limit, and Slurm's default MaxArraySize of 1,001 allows 0-999)."""
    return min(jobs, 1000) if kind == "array" else jobs


def _epoch(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def parse_phases(text: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        kind, _, k = part.strip().partition(":")
        if kind not in ("trivial", "gpu", "array") or not k.isdigit() or int(k) < 1:
            raise SystemExit(f"bench/slurm.py: bad phase {part!r} (use trivial:N, gpu:N or array:N, N submitters)")
        out.append((kind, int(k)))
    return out


ROWS = [("submissions/s", "submit_rate", "{:.0f}", True), ("jobs started/s", "start_rate", "{:.0f}", True),
        ("all done (s)", "all_done_s", "{:.1f}", False), ("first start (s)", "first_start_s", "{:.1f}", False),
        ("scheduler CPU s", "scheduler_cpu_s", "{:.1f}", False), ("node agents CPU s", "agents_cpu_s", "{:.1f}", False),
        ("failed / errors", None, None, None)]


def report(results: dict) -> str:
    lines = []
    for name, ph in results["phases"].items():
        s, c = ph.get("slurm"), ph.get("computehub")
        lines.append(f"\n{name}: {ph['jobs']} jobs")
        lines.append(f"  {'':<20}{'Slurm':>10}{'ComputeHub':>12}{'ratio':>8}")
        for label, key, fmt, higher in ROWS:
            if key is None:
                vs = [f"{r['failed']}/{r['submit_errors']}" if r else "—" for r in (s, c)]
                lines.append(f"  {label:<20}{vs[0]:>10}{vs[1]:>12}")
                continue
            a = s.get(key) if s else None
            b = c.get(key) if c else None
            ratio = ""
            if a and b:
                ratio = f"{(b / a if higher else a / b):.2f}×"
            lines.append(f"  {label:<20}{fmt.format(a) if a is not None else '—':>10}"
                         f"{fmt.format(b) if b is not None else '—':>12}{ratio:>8}")
        if len((s or c or {}).get("runs", ())) > 1:
            for label, key in (("submissions/s", "submit_rate"), ("jobs started/s", "start_rate")):
                each = ", ".join(f"{system} " + "/".join(f"{r[key]:.0f}" for r in x["runs"])
                                 for system, x in (("Slurm", s), ("ComputeHub", c)) if x)
                lines.append(f"  each run, {label}: {each}")
        if s and c:
            for what, key in (("submissions/s", "submit_rate"), ("jobs started/s", "start_rate")):
                r = c[key] / s[key] if s[key] else float("inf")
                lines.append(f"  target ComputeHub ≥ {TARGET:g}× Slurm on {what}: "
                             f"{'met' if r >= TARGET else 'MISSED'} ({r:.2f}×)")
    lines.append("\n(medians over each phase's runs; ratio: ComputeHub over Slurm for rates, Slurm over "
                 "ComputeHub for times and CPU; >1 = ComputeHub better)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000, help="jobs per phase")
    ap.add_argument("--phases", default="trivial:1,trivial:4,gpu:1,gpu:4",
                    help="comma-separated KIND:SUBMITTERS, KIND trivial or gpu")
    ap.add_argument("--only", choices=("slurm", "computehub"), help="run one system only")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each phase on each system (medians shown)")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--poll", type=float, default=0.05, help="the ComputeHub launcher's poll interval (s)")
    ap.add_argument("--find-escaped", choices=("on", "off"), default="on",
                    help="the local launcher's find_escaped (each start a full fork: bench/README.md)")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / "slurm.json"))
    args = ap.parse_args(argv)
    # Stopped with SIGTERM (kill, timeout), leave through the with-blocks below, which stop the
    # daemons this run started; otherwise slurmctld, the slurmds and munged stayed behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    phases = parse_phases(args.phases)
    if args.repeat < 1 or args.jobs < 1:
        raise SystemExit("bench/slurm.py: --repeat and --jobs must be at least 1")
    results = {"machine": machine(),
               "jobs": args.jobs, "repeat": args.repeat, "nodes": args.nodes, "gpus_per_node": 8,
               "launcher_poll_s": args.poll, "find_escaped": args.find_escaped == "on",
               "computehub_path": "REST API through the hub's proxy; local launcher", "phases": {}}
    for kind, k in phases:
        results["phases"][f"{kind}-{k}sub"] = {"jobs": jobs_of(kind, args.jobs)}
    if args.only != "computehub":
        with tempfile.TemporaryDirectory(prefix="chbench-slurm-") as d, SlurmCluster(Path(d), args.nodes) as c:
            print(f"Slurm up: {args.nodes} nodes × 8 GPUs", flush=True)
            run_phases(results, "slurm", "slurmctld", phases, args.repeat,
                       lambda k, kind, tag: slurm_phase(c, jobs_of(kind, args.jobs), k, kind == "gpu", tag,
                                                        array=kind == "array"))
    if args.only != "slurm":
        with tempfile.TemporaryDirectory(prefix="chbench-ch-") as d, \
                ComputeHubSide(Path(d), args.nodes, poll=args.poll, find_escaped=args.find_escaped == "on") as ch:
            print(f"ComputeHub up: {args.nodes} nodes × 8 GPUs (simulated), launcher poll {args.poll:g} s", flush=True)
            run_phases(results, "computehub", "service", phases, args.repeat,
                       lambda k, kind, tag: ch.phase(jobs_of(kind, args.jobs), k, kind == "gpu", tag,
                                                     array=kind == "array"))
    print(report(results))
    save(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
