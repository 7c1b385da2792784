"""What one look of the JupyterLab panel costs with a big job array waiting: the server
extension's ``GET computehub/workloads`` (``labextension/service.py``, ``my_workloads``).

    computehub bench panel                      # a 1,000-task array, 5 looks each way (~1 minute)
    computehub bench panel --tasks 200 --looks 3
    computehub bench panel --tasks 2 --jobs 50              # many jobs of her own waiting

The real JupyterHub, proxy and service (``tests/hub_ext/realhub.py``, SQLite), a user with
an array of ``--tasks`` one-GPU tasks (all but the 8 her queue's user limit lets run wait)
and ``--jobs`` jobs of her own (3) waiting behind them; the extension's service client with a token scoped as a
single-user server's. Two ways, alternating look by look in one run: the look as it was until
2026-12-07's seventh session (the listing, then one ``GET workloads/{id}`` for the first of an
array's tasks in a state and each other waiting job, at most 50: ``one request per row``), and the
look now (``my_workloads``: the listing asks for every waiting workload's explanation at once,
``explain=true``). Prints the median look and the requests each makes.
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
WAITING = ("pending", "held", "awaiting_approval")
ROWS_MAX = 50           # waiting rows the look asked about one by one, before


def first_of_rows(workloads: list[dict]) -> list[dict]:
    """What the look asked about one by one before: of a job array's tasks in one state only the
    first, nearest the front first, at most ROWS_MAX."""
    out, rows = [], set()
    for w in sorted((w for w in workloads if w["state"] in WAITING),
                    key=lambda w: (w.get("position") or float("inf"), w["id"])):
        a = w.get("array")
        if a and (a["id"], w["state"]) in rows:
            continue
        if a:
            rows.add((a["id"], w["state"]))
        out.append(w)
    return out[:ROWS_MAX]


async def per_row(client: service.ServiceClient) -> tuple[int, int]:
    """The look as it was: the listing without explanations, then a request per waiting row.
    (rows shown, requests to the service)"""
    user = (await client.me())["name"]
    live, recent, _ = await asyncio.gather(
        client.call("GET", "workloads", {"user": user, "limit": service.LIVE_MAX}),
        client.call("GET", "workloads", [("user", user), ("limit", service.RECENT_ENDED), ("order", "newest")]
                    + [("state", s) for s in service.TERMINAL]),
        client.call("GET", "queues"))
    asked = first_of_rows(live["workloads"])
    await asyncio.gather(*(client.call("GET", f"workloads/{w['id']}") for w in asked))
    return len(live["workloads"]) + len(recent["workloads"]), 4 + len(asked)


async def at_once(client: service.ServiceClient) -> tuple[int, int]:
    """The look now (``my_workloads``): every waiting workload's explanation in the listing."""
    report = await client.my_workloads()
    assert all("explanation" in w for w in report["workloads"] if w["state"] == "pending")
    return len(report["workloads"]), 4


WAYS = {"one request per row (before)": per_row, "explain=true (now)": at_once}


async def looks(client: service.ServiceClient, n: int) -> dict[str, dict]:
    out = {way: {"ms": [], "requests": 0, "rows": 0} for way in WAYS}
    for _ in range(n):
        for way, look in WAYS.items():
            t0 = time.perf_counter()
            rows, requests = await look(client)
            out[way]["ms"].append((time.perf_counter() - t0) * 1000)
            out[way]["requests"], out[way]["rows"] = requests, rows
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=1000, help="tasks of the waiting array (2 to 1000)")
    ap.add_argument("--jobs", type=int, default=3, help="jobs of her own waiting beside the array (0 to 500)")
    ap.add_argument("--looks", type=int, default=5, help="looks each way (medians shown)")
    ap.add_argument("--json", metavar="FILE", default=str(RESULTS / "panel_poll.json"))
    args = ap.parse_args(argv)
    if not 2 <= args.tasks <= 1000 or not 0 <= args.jobs <= 500 or args.looks < 1:
        raise SystemExit("bench/panel_poll.py: --tasks must be 2 to 1000, --jobs 0 to 500 and --looks at least 1")
    results = {"machine": machine(), "tasks": args.tasks, "jobs": args.jobs, "looks": args.looks}
    with tempfile.TemporaryDirectory(prefix="chbench-panel-") as d, RealHub(Path(d)) as hub:
        alice = hub.tokens["alice"]
        r = hub.call("POST", "/workloads", alice, json={"name": "sweep", "kind": "batch", "queue": "vision",
                                                         "resources": {"gpu": 1}, "array": f"0-{args.tasks - 1}"})
        r.raise_for_status()
        for i in range(args.jobs):
            hub.call("POST", "/workloads", alice, json={"name": f"job-{i}", "kind": "batch", "queue": "vision",
                                                        "resources": {"gpu": 1}}).raise_for_status()
        time.sleep(1.5)                 # a cycle: they have their positions
        client = service.ServiceClient(hub.service_url, hub.make_token("alice", scopes=SCOPES), timeout=120)
        results["ways"] = asyncio.run(looks(client, args.looks))
    print(f"{args.tasks} tasks of one array and {args.jobs} jobs waiting; medians of {args.looks} looks")
    base = statistics.median(results["ways"]["one request per row (before)"]["ms"])
    for way, r in results["ways"].items():
        med = statistics.median(r["ms"])
        print(f"  {way:<30} {med:9.1f} ms   {r['requests']:5d} requests to the service   "
              f"{base / med:6.2f}× (before / this)")
    save(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
