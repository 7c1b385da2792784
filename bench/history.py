"""Does a year of history slow the service down? Reads through the real hub, side by side.

    .venv/bin/python bench/history.py                       # ~2 minutes
    .venv/bin/python bench/history.py --workloads 500000 --json bench/results/history.json

Fills a SQLite database with a year of ended work (``--workloads`` jobs of ``--users``
people over 365 days, each with its submitted / admitted / running / ended events and
one ledger interval; alice, a heavy user, owns 2 % of it), then starts the real
JupyterHub + proxy + ComputeHub (``tests/hub_ext/realhub.py``) on it and on a database
with a short history, one after the other, and times the same requests with real hub
tokens: a user's latest ended work (``%jobs --all``, ``computehub jobs --all``), a team
lead's and an admin's, the week's usage, the audit log, and the service's start (until
its API answers). The same is measured on a short history (``--small``, 1 % of it, so that
every page is as full): prints medians and p95 and the ratio year / short, where what
grows with history shows as a ratio well above 1.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hub_ext"))
sys.path.insert(0, str(ROOT))

from realhub import RealHub  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from scheduler.model import CANCELLED, FAILED, FINISHED, Assignment, Workload  # noqa: E402
from scheduler.store import tables as T  # noqa: E402
from scheduler.store.sql import SqlStore  # noqa: E402

YEAR = 365 * 86400
ENDED = (FINISHED, FINISHED, FINISHED, FAILED, CANCELLED)
ENDED_STATES = "state=finished&state=failed&state=cancelled&state=preempted&state=reclaimed&state=rejected"


def fill(db_url: str, workloads: int, users: int, seed: int = 1) -> None:
    """A year of ended work, written straight into the store's tables in large batches."""
    rng = random.Random(seed)
    store = SqlStore(db_url)          # creates the schema (Alembic), as the service would
    now = time.time()
    people = ["alice", "bob", "carol", "lin"] + [f"user{i:04d}" for i in range(users - 4)]
    batch_w, batch_e, batch_a = [], [], []
    has_ended_at = "ended_at" in T.workloads.c      # the schema before 2026-12-06 lacks it
    with store.engine.begin() as conn:
        for n in range(workloads):
            user = "alice" if rng.random() < 0.02 else rng.choice(people)
            queue = "nlp" if user == "carol" or rng.random() < 0.4 and user not in ("alice", "bob", "lin") \
                else "vision"
            submitted = now - YEAR + YEAR * n / workloads
            started = submitted + rng.expovariate(1 / 600)
            ended = started + rng.expovariate(1 / 7200)
            gpus = rng.choice((1, 1, 1, 2, 4, 8))
            w = Workload(id=f"h{n:07d}", seq=n + 1, user=user, queue=queue, kind="training",
                         priority="training", request={"gpu": gpus, "cpu": 4000, "memory": 16 << 30},
                         time_limit=rng.choice((None, 3600.0, 86400.0)), name=f"run-{n}",
                         submitted_at=submitted, state=rng.choice(ENDED), admitted_at=started,
                         started_at=started, ended_at=ended, exit_code=0, reason="exit code 0",
                         placement=[Assignment(node="gpu-a", gpus=tuple(range(gpus)))])
            batch_w.append({"id": w.id, "seq": w.seq, "user": user, "queue": queue, "kind": w.kind,
                            "priority": w.priority, "state": w.state, "submitted_at": submitted,
                            "data": w.to_dict(), **({"ended_at": ended} if has_ended_at else {})})
            for kind, t in (("submitted", submitted), ("admitted", started), ("running", started),
                            (w.state, ended)):
                batch_e.append({"time": t, "kind": kind, "workload_id": w.id, "reason": f"{kind} {w.id}",
                                "data": {"user": user, "queue": queue}})
            batch_a.append({"workload_id": w.id, "user": user, "queue": queue, "flavor": "a100",
                            "gpus": gpus, "start": started, "end": ended})
            if len(batch_w) == 5000 or n == workloads - 1:
                conn.execute(insert(T.workloads), batch_w)
                conn.execute(insert(T.events), batch_e)
                conn.execute(insert(T.allocations), batch_a)
                batch_w, batch_e, batch_a = [], [], []
    store.close()


REQUESTS = [   # (label, user, path)
    ("alice: %jobs --all (latest 1000)", "alice", f"workloads?user=alice&{ENDED_STATES}&order=newest&limit=1000"),
    ("alice: latest 100 ended", "alice", f"workloads?{ENDED_STATES}&order=newest&limit=100"),
    ("lin (team lead): latest 100 ended", "lin", f"workloads?{ENDED_STATES}&order=newest&limit=100"),
    ("ada (admin): latest 100 ended", "ada", f"workloads?{ENDED_STATES}&order=newest&limit=100"),
    ("alice: usage, last 7 days", "alice", "usage"),
    ("ada: usage by queue, last 7 days", "ada", "usage?by=queue"),
    ("ada: audit, latest 100", "ada", "audit?limit=100"),
]


def measure(workdir: Path, db_url: str, repeat: int) -> dict:
    t0 = time.monotonic()
    with RealHub(workdir, db_url=db_url) as hub:
        started = time.monotonic() - t0
        tokens = {u: hub.make_token(u) for u in {u for _, u, _ in REQUESTS}}
        out = {"hub and service start (s)": {"median": started, "p95": started}}
        for label, user, path in REQUESTS:
            times = []
            for _ in range(repeat):
                t = time.monotonic()
                r = hub.call("GET", f"/{path}", tokens[user], timeout=300)
                times.append((time.monotonic() - t) * 1000)
                if r.status_code != 200:
                    raise SystemExit(f"{label}: {r.status_code} {r.text[:300]}")
            times.sort()
            out[label + " (ms)"] = {"median": statistics.median(times),
                                    "p95": times[min(len(times) - 1, int(0.95 * len(times)))],
                                    "items": len(r.json().get("workloads", r.json().get("rows", r.json().get(
                                        "events", []))))}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", type=int, default=200_000, help="ended workloads in the year")
    ap.add_argument("--users", type=int, default=200, help="people who submitted them")
    ap.add_argument("--repeat", type=int, default=15, help="requests per measurement")
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "history.json"),
                    help="where to write results (default bench/results/history.json)")
    ap.add_argument("--small", type=int, default=None,
                    help="ended workloads of the short history (default: 1 %% of --workloads)")
    args = ap.parse_args(argv)
    small = args.small if args.small is not None else max(1, args.workloads // 100)
    with tempfile.TemporaryDirectory(prefix="computehub-history-") as tmp:
        tmp = Path(tmp)
        runs = {}
        for label, n in (("short", small), ("year", args.workloads)):
            url = f"sqlite:///{tmp / (label + '.sqlite')}"
            t = time.monotonic()
            fill(url, n, args.users)
            size_mb = (tmp / f"{label}.sqlite").stat().st_size / 2**20
            print(f"{label}: {n:,} ended workloads ({4 * n:,} events, {n:,} ledger intervals) filled in "
                  f"{time.monotonic() - t:.0f} s: {size_mb:.0f} MiB", flush=True)
            (tmp / label).mkdir()
            runs[label] = measure(tmp / label, url, args.repeat)
    short, year = runs["short"], runs["year"]
    print(f"\n{'request':<44} {'short: median / p95':>22} {'a year: median / p95':>22} {'ratio':>7}")
    for label in short:
        e, y = short[label], year[label]
        print(f"{label:<44} {e['median']:>10.1f} / {e['p95']:<9.1f} {y['median']:>10.1f} / {y['p95']:<9.1f} "
              f"{y['median'] / e['median']:>7.2f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"workloads": args.workloads, "small": small, "users": args.users,
                                           "db_mib": size_mb, "short": short, "year": year}, indent=1))
    print(f"results: {args.json}")


if __name__ == "__main__":
    main()
