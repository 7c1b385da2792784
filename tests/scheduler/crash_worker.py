"""A scheduler process for the crash tests: run it, SIGKILL it, look at what survived.

    python crash_worker.py STORE_URL SEED ACK_FILE [--release] [--die-at-write N [--anywhere]]

It opens ``Scheduler(SqlStore(STORE_URL))`` and, if the database is new (or
an earlier run was killed half way through setting up), creates the nodes and
the queue tree it needs; it never creates twice what is already there. Then it
loops forever, without sleeping, doing a seeded random mix of submissions (1-8
GPUs, gangs, time limits), cycles on a virtual clock, starts, finishes,
cancellations and stops of preempted work. Some steps finish everything that
runs and submit a big batch, so the next cycle admits dozens of workloads in
one large transaction: a kill then lands in the middle of it.

The acknowledgement file gets one line per durable fact, written (and
fsync'ed) strictly after the call that committed it returned:

    S <id>    a submission
    A <id>    an admission made by a cycle
    C <n>     a cycle is about to run (not fsync'ed; tells where a kill landed)
    D <n>     that cycle has committed
    READY     setup is done, the loop starts

``--release`` runs with ``EngineConfig(release_on_preempt=True)``.
``--die-at-write N`` makes the process SIGKILL itself just before the N-th store
write made inside a cycle (with ``--anywhere``: inside any transaction), so the
kill is certain to land in the middle of a transaction; otherwise the parent
kills it at a random moment.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scheduler import EngineConfig, Scheduler, SchedulerError  # noqa: E402
from scheduler.model import ADMITTED, PREEMPTING  # noqa: E402
from scheduler.store.sql import SqlStore  # noqa: E402

NODES = [
    {"name": f"n{i}", "gpus": 8, "gpu_model": "a100" if i < 2 else "h100", "cpu": 128,
     "memory": "1024Gi", "labels": {"zone": "z1" if i % 2 == 0 else "z2"}}
    for i in range(4)
]
QUEUES = [   # parents before children
    {"name": "org", "guaranteed": {"gpu": 32}},
    {"name": "team-a", "parent": "org", "guaranteed": {"gpu": 12}, "user_limit": {"gpu": 10}},
    {"name": "team-b", "parent": "org", "guaranteed": {"gpu": 12}, "lending_limit": {"gpu": 4}},
    {"name": "team-c", "parent": "org", "guaranteed": {"gpu": 8}, "limit": {"gpu": 24}},
]
TEAMS = [q["name"] for q in QUEUES if q.get("parent")]
USERS = ["ada", "bob", "cy", "dee"]
MAX_PENDING = 150
PREEMPT_AFTER = 0.0


class Acks:
    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, lines, sync: bool = True) -> None:
        os.write(self.fd, "".join(f"{line}\n" for line in lines).encode())
        if sync:
            os.fsync(self.fd)


def setup(s: Scheduler, now: float) -> None:
    """Create what is missing; an earlier run may have been killed half way."""
    for n in NODES:
        if n["name"] not in s.state.inventory.nodes:
            s.put_node(n, now=now)
    for q in QUEUES:
        if q["name"] not in s.state.tree.specs:
            s.put_queue(q, now=now)
    # Training may be preempted at once (as batch may by default), so preemption
    # happens within a short run.
    for name in ("training", "preemptible"):
        d = s.state.classes[name].to_dict()
        if d["preempt_after"] != PREEMPT_AFTER:
            d["preempt_after"] = PREEMPT_AFTER
            s.put_class(d, now=now)


def spec(rng: random.Random, small: bool = False) -> dict:
    kind = rng.choice(["training", "training", "batch", "batch", "notebook"])
    gpus = 1 if small else rng.choice([1, 1, 2, 2, 4, 8])
    d = {"user": rng.choice(USERS), "queue": rng.choice(TEAMS), "kind": kind,
         "resources": {"gpu": gpus, "cpu": rng.choice([1, 2, 4])}}
    if kind != "notebook" and not small and rng.random() < 0.25:
        d["workers"] = rng.choice([2, 3])
        d["resources"]["gpu"] = rng.choice([1, 2, 4])
    if rng.random() < 0.3:
        d["gpu_model"] = rng.choice(["a100", "h100"])
    if rng.random() < 0.4:
        d["time_limit"] = rng.choice([60.0, 600.0, 3600.0])
    if rng.random() < 0.1:
        d["node_selector"] = {"zone": rng.choice(["z1", "z2"])}
    return d


WRITES = ("put_workload", "put_workloads", "add_event", "open_allocation", "close_allocation",
          "put_fairshare", "put_node", "put_queue", "put_class")


def die_at_write(store: SqlStore, n: int, anywhere: bool, in_cycle: list[bool]) -> None:
    """SIGKILL this process just before the ``n``-th write (in a cycle unless ``anywhere``)."""
    count = [0]

    def wrap(name):
        real = getattr(store, name)

        def write(*a, **kw):
            if anywhere or in_cycle[0]:
                count[0] += 1
                if count[0] >= n:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*a, **kw)
        setattr(store, name, write)

    for name in WRITES:
        wrap(name)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("seed", type=int)
    p.add_argument("ack")
    p.add_argument("--release", action="store_true")
    p.add_argument("--die-at-write", type=int, default=0)
    p.add_argument("--anywhere", action="store_true")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    acks = Acks(args.ack)
    s = Scheduler(SqlStore(args.url), config=EngineConfig(release_on_preempt=args.release))
    in_cycle = [False]
    now = (s.engine.fairshare.time or 0.0) + 1.0
    setup(s, now)
    acks.write(["READY"])
    if args.die_at_write:
        die_at_write(s.store, args.die_at_write, args.anywhere, in_cycle)
    cycles = 0

    def submit(small: bool = False) -> None:
        try:
            w = s.submit(spec(rng, small), now=now)
        except SchedulerError:      # refused (e.g. over a guarantee): nothing to acknowledge
            return
        acks.write([f"S {w.id}"])

    while True:
        r = rng.random()
        if r < 0.12:
            # Everything running ends; a big batch follows, and the next cycle admits
            # many workloads in one transaction.
            for w in sorted(s.state.holding.values(), key=lambda w: w.seq):
                if w.state != PREEMPTING:
                    s.mark_finished(w.id, now=now, exit_code=rng.choice([0, 0, 0, 1]))
            for _ in range(rng.randint(30, 60)):
                submit(small=True)
        else:
            for _ in range(rng.randint(0, 6)):
                submit()
        now += rng.choice([1.0, 5.0, 30.0, 300.0])
        cycles += 1
        acks.write([f"C {cycles}"], sync=False)
        in_cycle[0] = True
        res = s.cycle(now=now)
        in_cycle[0] = False
        acks.write([f"A {w.id}" for w in res.admitted] + [f"D {cycles}"])
        for w in list(res.admitted):
            if w.state == ADMITTED and rng.random() < 0.7:
                s.mark_running(w.id, now=now)
        holders = sorted(s.state.holding.values(), key=lambda w: w.seq)
        for w in holders:
            if w.state == PREEMPTING:
                if rng.random() < 0.6:
                    s.mark_stopped(w.id, now=now)
            elif rng.random() < 0.15:
                s.mark_finished(w.id, now=now, exit_code=rng.choice([0, 0, 1]))
            elif rng.random() < 0.03:
                s.cancel(w.id, now=now)
        pending = sorted(s.state.pending)
        for wid in pending:
            if rng.random() < (0.3 if len(pending) > MAX_PENDING else 0.02):
                s.cancel(wid, now=now)


if __name__ == "__main__":
    main(sys.argv[1:])
