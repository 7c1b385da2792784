"""What acting on a whole job array costs: release, update, hold and cancel of an array of N tasks.

    computehub bench array-ops                          # 1,000 tasks, 3 runs each (~2 minutes)
    computehub bench array-ops --tasks 200 --repeat 1 --no-slurm

Three ways, side by side in one run, each on fresh arrays of ``--tasks`` tasks submitted held
with a cap of one at a time (``0-999%1``: released, one task starts and the rest wait, so
there is something left to hold): ComputeHub's ``POST workloads/{id}/array-action`` (what
``computehub release|hold|cancel --array`` and the lab panel send: one request, one
transaction) and, to update (a 30-minute limit on every waiting task), ``PATCH
workloads/{id}?tasks=all`` (``computehub update --array``); one request per task, through the
same proxy on one keep-alive connection (what ``--array`` did before; what a script looping
over the ids does); and Slurm's ``scontrol release|hold <jobid>``, ``scontrol update
JobId=<jobid> TimeLimit=30`` and ``scancel <jobid>`` on an ``sbatch --hold --array`` job (one
command each, its process start included) on the throw-away cluster of
bench/slurm.py. ComputeHub is the real JupyterHub, proxy and service on SQLite
(``tests/hub_ext/realhub.py``), called with a real hub token. Each time is until the answer
came back; prints the median of each and the ratios.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hub_ext"))
sys.path.insert(0, str(ROOT / "bench"))

from realhub import RealHub  # noqa: E402
from results_file import machine, save  # noqa: E402

RESULTS = ROOT / "bench" / "results"
STEPS = ("release", "update", "hold", "cancel")
LIMIT = 1800        # what update sets: a 30-minute limit where none was (a user may shorten one)


def computehub_runs(hub: RealHub, n: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    """{"one request": {step: [s, ...]}, "a request per task": {...}}, runs alternating."""
    token = hub.tokens["alice"]
    s = requests.Session()
    s.headers["Authorization"] = f"token {token}"
    times: dict[str, dict[str, list[float]]] = {"one request": {k: [] for k in STEPS},
                                                "a request per task": {k: [] for k in STEPS}}

    def call(method: str, path: str, body=None) -> dict:
        r = s.request(method, hub.api + path, json=body, timeout=300)
        if r.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r.json()

    def states(array: str) -> dict[str, str]:
        listing = call("GET", f"/workloads?array={array}&limit=10000&" + "&".join(
            f"state={x}" for x in ("held", "pending", "admitted", "running", "cancelling", "cancelled")))
        return {w["id"]: w["state"] for w in listing["workloads"]}

    for run in range(repeat):
        for way in times:
            w = call("POST", "/workloads", {"name": f"array-ops-{run}", "kind": "batch",
                                            "resources": {"cpu": "100m"}, "array": f"0-{n - 1}%1", "hold": True})
            array, tasks = w["id"], w["tasks"]
            for step in STEPS:
                if step == "update":    # wait for the cycle that starts one: update and hold are for the others
                    deadline = time.time() + 60
                    while "admitted" not in states(array).values() and time.time() < deadline:
                        time.sleep(0.2)
                t0 = time.perf_counter()
                if way == "one request" and step == "update":
                    out = call("PATCH", f"/workloads/{array}?tasks=all", {"time_limit": LIMIT})
                    done = len(out["tasks"])
                elif way == "one request":
                    out = call("POST", f"/workloads/{array}/array-action", {"action": step})
                    done = len(out["tasks"])
                else:
                    now = states(array) if step != "release" else {t: "held" for t in tasks}
                    t0 = time.perf_counter()        # the listing is not the action's cost
                    todo = [t for t in tasks if now.get(t) in {"release": ("held",), "hold": ("pending",),
                                                               "update": ("pending",),
                                                               "cancel": ("held", "pending", "admitted")}[step]]
                    for t in todo:
                        call(*{"release": ("POST", f"/workloads/{t}/release", {}),
                               "update": ("PATCH", f"/workloads/{t}", {"time_limit": LIMIT}),
                               "hold": ("POST", f"/workloads/{t}/hold", {}),
                               "cancel": ("DELETE", f"/workloads/{t}", None)}[step])
                    done = len(todo)
                took = time.perf_counter() - t0
                times[way][step].append(took)
                print(f"  computehub, {way}, run {run + 1}: {step} {done} tasks in {took * 1000:.0f} ms", flush=True)
    return times


def slurm_runs(n: int, repeat: int, nodes: int) -> dict[str, list[float]]:
    from slurm_cluster import SlurmCluster, ensure_installed
    ensure_installed()
    times: dict[str, list[float]] = {k: [] for k in STEPS}
    with tempfile.TemporaryDirectory(prefix="chbench-arrayops-slurm-") as d, SlurmCluster(Path(d), nodes) as c:
        for run in range(repeat):
            job = c.run("sbatch", "--parsable", "--hold", f"--array=0-{n - 1}%1", "-J", f"array-ops-{run}",
                        "-o", "/dev/null", "--wrap", "sleep 600").stdout.strip().split(";")[0]
            for step in STEPS:
                if step == "update":
                    deadline = time.time() + 60
                    while "R" not in c.run("squeue", "-h", "-j", job, "-o", "%t", check=False).stdout.split() \
                            and time.time() < deadline:
                        time.sleep(0.2)
                cmd = {"cancel": ("scancel", job),
                       "update": ("scontrol", "update", f"JobId={job}", f"TimeLimit={LIMIT // 60}")}.get(
                    step, ("scontrol", step, job))
                t0 = time.perf_counter()
                c.run(*cmd)
                took = time.perf_counter() - t0
                times[step].append(took)
                print(f"  slurm, run {run + 1}: {label(step)} of a {n}-task array in {took * 1000:.0f} ms",
                      flush=True)
    return times


def label(step: str) -> str:
    return {"cancel": "scancel", "update": "scontrol update TimeLimit="}.get(step, f"scontrol {step}")


def report(results: dict) -> str:
    med = {way: {k: statistics.median(v) * 1000 for k, v in steps.items()} for way, steps in results["times"].items()}
    ways = list(med)
    lines = [f"{results['tasks']} tasks per array, medians of {results['repeat']} run(s), ms",
             f"{'step':<9}" + "".join(f"{w:>22}" for w in ways) + f"{'per task / one':>16}"
             + ("" if "slurm" not in med else f"{'slurm / one':>13}")]
    for step in STEPS:
        row = f"{step:<9}" + "".join(f"{med[w][step]:>22.1f}" for w in ways)
        row += f"{med['a request per task'][step] / med['one request'][step]:>15.1f}×"
        if "slurm" in med:
            row += f"{med['slurm'][step] / med['one request'][step]:>12.2f}×"
        lines.append(row)
    lines.append("(ratios: that way's time over one array-action request's; >1 = the array-action is faster)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=1000, help="tasks per array (at most 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each way (medians shown)")
    ap.add_argument("--no-slurm", action="store_true", help="ComputeHub's two ways only")
    ap.add_argument("--nodes", type=int, default=16, help="Slurm's emulated nodes")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / "array_ops.json"))
    args = ap.parse_args(argv)
    if not 2 <= args.tasks <= 1000 or args.repeat < 1:
        raise SystemExit("bench/array_ops.py: --tasks must be 2 to 1000 and --repeat at least 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # leave through the with-blocks
    results = {"machine": machine(), "tasks": args.tasks, "repeat": args.repeat}
    with tempfile.TemporaryDirectory(prefix="chbench-arrayops-") as d:
        hub = RealHub(Path(d))
        try:
            hub.start()
            results["times"] = computehub_runs(hub, args.tasks, args.repeat)
        finally:
            hub.stop()
    if not args.no_slurm:
        results["times"]["slurm"] = slurm_runs(args.tasks, args.repeat, args.nodes)
    print(report(results))
    save(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
