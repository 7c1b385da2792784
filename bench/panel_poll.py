"""What one look of the JupyterLab panel costs with a big job array waiting: the server
extension's ``GET computehub/workloads`` (``labextension/service.py``, ``my_workloads``).

    computehub bench panel                      # a 1,000-task array, 5 looks each way (~1 minute)
    computehub bench panel --tasks 200 --looks 3

The real JupyterHub, proxy and service (``tests/hub_ext/realhub.py``, SQLite), a user with
an array of ``--tasks`` one-GPU tasks (all but the 8 her queue's user limit lets run wait)
and three jobs of her own waiting behind them; the extension's service client with a token scoped as a
single-user server's. Two ways, alternating look by look in one run: asking the service
about each waiting workload (what it did before 2026-12-07: one ``GET workloads/{id}`` per
waiting task) and asking about the first of an array's tasks in a state and at most 50
(``explained``, now). Prints the median look and the requests each makes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hub_ext"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from realhub import RealHub  # noqa: E402
from results_file import machine, save  # noqa: E402

from labextension import service  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SCOPES = ["custom:computehub:submit", "access:services!service=computehub"]
WAYS = {"each waiting workload": lambda ws, *_: [w for w in ws if w["state"] in service.WAITING],
        "first of each array, at most 50": service.explained}


async def looks(client: service.ServiceClient, n: int) -> dict[str, dict]:
    real = service.explained
    out = {way: {"ms": [], "details": 0, "rows": 0} for way in WAYS}
    try:
        for _ in range(n):
            for way, pick in WAYS.items():
                asked = []
                service.explained = lambda *a, pick=pick: asked.__setitem__(slice(None), pick(*a)) or asked
                t0 = time.perf_counter()
                report = await client.my_workloads()
                out[way]["ms"].append((time.perf_counter() - t0) * 1000)
                out[way]["details"], out[way]["rows"] = len(asked), len(report["workloads"])
    finally:
        service.explained = real
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=1000, help="tasks of the waiting array (2 to 1000)")
    ap.add_argument("--looks", type=int, default=5, help="looks each way (medians shown)")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / "panel_poll.json"))
    args = ap.parse_args(argv)
    if not 2 <= args.tasks <= 1000 or args.looks < 1:
        raise SystemExit("bench/panel_poll.py: --tasks must be 2 to 1000 and --looks at least 1")
    results = {"machine": machine(), "tasks": args.tasks, "looks": args.looks}
    with tempfile.TemporaryDirectory(prefix="chbench-panel-") as d, RealHub(Path(d)) as hub:
        alice = hub.tokens["alice"]
        r = hub.call("POST", "/workloads", alice, json={"name": "sweep", "kind": "batch", "queue": "vision",
                                                         "resources": {"gpu": 1}, "array": f"0-{args.tasks - 1}"})
        r.raise_for_status()
        for i in range(3):
            hub.call("POST", "/workloads", alice, json={"name": f"job-{i}", "kind": "batch", "queue": "vision",
                                                        "resources": {"gpu": 1}}).raise_for_status()
        time.sleep(1.5)                 # a cycle: they have their positions
        client = service.ServiceClient(hub.service_url, hub.make_token("alice", scopes=SCOPES), timeout=120)
        results["ways"] = asyncio.run(looks(client, args.looks))
    print(f"{args.tasks} tasks of one array and 3 jobs waiting; medians of {args.looks} looks")
    base = statistics.median(results["ways"]["each waiting workload"]["ms"])
    for way, r in results["ways"].items():
        med = statistics.median(r["ms"])
        print(f"  {way:<34} {med:9.1f} ms   {r['details'] + 3:5d} requests to the service   "
              f"{base / med:6.1f}× (each waiting / this)")
    save(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
