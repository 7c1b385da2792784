"""Crash tests: a scheduler process is SIGKILLed at random points, on SQLite and PostgreSQL.

``crash_worker.py`` runs a real ``Scheduler(SqlStore(url))`` in a subprocess
that submits, cycles, starts, finishes, cancels and stops work as fast as it
can, and writes an acknowledgement (fsync'ed) after every submission and every
cycle commit. The test kills it with SIGKILL after a random, seeded delay (so
kills land inside cycles and inside large transactions), then opens the
database in this process and checks that:

- the scheduler's invariants hold on the reloaded state (queue and user
  limits aside, see ``CHECK_LIMITS``);
- every acknowledged submission exists;
- every acknowledged admission is durable: its ``admitted`` event and ledger
  interval exist, and its state agrees with its latest admission event
  (holding after ``admitted``; pending only after ``requeued``/``preempted``);
- the database agrees with itself and with the loaded state: the
  ``gpu_assignments`` rows are exactly the placements of the holding
  workloads; open ledger intervals are exactly one per holding workload; the
  ``state`` column matches the stored workload;
- the scheduler can go on (a submission and a cycle, invariants again).

The next round restarts the worker on the same database. Nothing is
emulated: real processes, a real SQLite file, a real PostgreSQL server.

``test_failure_inside_a_cycle_*`` makes one store write inside a cycle's
transaction raise and checks that memory is rebuilt to exactly what the store
holds.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from sqlalchemy import select

from crash_worker import setup
from scheduler import EngineConfig, Scheduler
from scheduler.invariants import violations
from scheduler.model import ADMITTED, HOLDING, PENDING, PREEMPTING, RUNNING, TERMINAL
from scheduler.store import tables as T
from scheduler.store.sql import SqlStore

WORKER = Path(__file__).with_name("crash_worker.py")
ROUNDS = 10
READY_TIMEOUT = 60.0
SELF_KILL_TIMEOUT = 20.0
# Queue and user limits are left out of the invariants checked after a crash: with
# release_on_preempt=False the engine lets new work use the quota of victims that are
# still stopping (PREEMPTING), so a user or queue can be over its limit until they
# stop. That is an engine matter, not a durability one; set True once it is fixed.
CHECK_LIMITS = True


class Acks:
    """What the worker acknowledged over all rounds."""

    def __init__(self):
        self.submitted: set[str] = set()
        self.admitted: set[str] = set()
        self.kills_in_cycle = 0

    def read(self, path: Path) -> bool:
        """Add the complete lines of ``path``; True if the kill landed inside a cycle."""
        text = path.read_text() if path.exists() else ""
        lines = text.split("\n")[:-1]       # a torn last line (no newline) is not an ack
        last = None
        for line in lines:
            tag, _, rest = line.partition(" ")
            if tag == "S":
                self.submitted.add(rest)
            elif tag == "A":
                self.admitted.add(rest)
            elif tag in ("C", "D"):
                last = tag
        return last == "C"


def ready(path: Path) -> bool:
    return path.exists() and "READY\n" in path.read_text()


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)       # reaped: no zombie is left behind


def run_and_kill(url: str, seed: int, ack: Path, log: Path, *, release: bool = False,
                 delay: float = 0.0, wait_ready: bool = True, die_at_write: int = 0,
                 anywhere: bool = False) -> None:
    """Run the worker and SIGKILL it ``delay`` s after it is ready (or after it starts);
    with ``die_at_write`` it kills itself in the middle of a transaction."""
    args = [sys.executable, str(WORKER), url, str(seed), str(ack)]
    args += ["--release"] if release else []
    args += ["--die-at-write", str(die_at_write)] if die_at_write else []
    args += ["--anywhere"] if anywhere else []
    with open(log, "wb") as err:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    try:
        if wait_ready:
            deadline = time.monotonic() + READY_TIMEOUT
            while not ready(ack):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"worker did not get ready (rc={proc.poll()}):\n{log.read_text()}")
                time.sleep(0.01)
        if die_at_write:
            try:
                proc.wait(timeout=SELF_KILL_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker did not reach store write {die_at_write} in {SELF_KILL_TIMEOUT} s")
        else:
            time.sleep(delay)
            if proc.poll() is not None:
                pytest.fail(f"worker died by itself (rc={proc.returncode}):\n{log.read_text()}")
    finally:
        kill(proc)
    assert proc.returncode == -signal.SIGKILL, log.read_text()


def held_in_db(store: SqlStore) -> set[tuple[str, int, str]]:
    ga = T.gpu_assignments
    with store.engine.connect() as c:
        return {tuple(r) for r in c.execute(select(ga.c.node, ga.c.gpu_index, ga.c.workload_id))}


def held_in_memory(s: Scheduler) -> set[tuple[str, int, str]]:
    return {(a.node, g, w.id) for w in s.state.holding.values() for a in w.placement for g in a.gpus}


def check_consistent(s: Scheduler) -> dict:
    """The loaded state, and the database, agree with themselves and each other."""
    store = s.store
    assert violations(s.state, check_limits=CHECK_LIMITS) == []
    for w in s.state.workloads.values():
        assert w.state not in TERMINAL
        assert (w.id in s.state.holding) == (w.state in HOLDING), w.id
        assert (w.id in s.state.pending) == (w.state == PENDING), w.id
    assert held_in_db(store) == held_in_memory(s)
    wl = T.workloads
    with store.engine.connect() as c:
        rows = list(c.execute(select(wl.c.id, wl.c.state, wl.c.seq, wl.c.data)))
    everything = {}
    for wid, state, seq, data in rows:
        assert data["state"] == state and data["id"] == wid and data["seq"] == seq
        everything[wid] = data
    live = {wid for wid, d in everything.items() if d["state"] not in TERMINAL}
    assert live == set(s.state.workloads)
    # The ledger: one open interval per holding workload, none for anything else.
    open_by = defaultdict(int)
    for a in store.get_allocations():
        if a.end is None:
            open_by[a.workload_id] += 1
    assert dict(open_by) == {wid: 1 for wid in s.state.holding}, \
        f"open ledger intervals {dict(open_by)} vs holding {sorted(s.state.holding)}"
    return everything


def check_acks(s: Scheduler, everything: dict, acks: Acks) -> None:
    lost = sorted(acks.submitted - set(everything))
    assert not lost, f"{len(lost)} acknowledged submissions lost, e.g. {lost[:5]}"
    for wid in sorted(acks.submitted)[:: max(1, len(acks.submitted) // 20)]:
        assert s.store.get_workload(wid) is not None
    history = defaultdict(list)
    for e in s.store.get_events(kinds=("admitted", "preempted", "requeued")):
        history[e.workload_id].append(e.kind)
    ledger = {a.workload_id for a in s.store.get_allocations()}
    for wid in sorted(acks.admitted):
        assert wid in everything, f"acknowledged admission {wid} lost"
        assert "admitted" in history[wid], f"{wid}: acknowledged admission has no admitted event"
        assert wid in ledger, f"{wid}: acknowledged admission has no ledger interval"
        state, last = everything[wid]["state"], history[wid][-1]
        if state in (ADMITTED, RUNNING):
            assert last == "admitted", (wid, state, history[wid])
        elif state == PREEMPTING:
            assert last == "preempted", (wid, state, history[wid])
        elif state == PENDING:
            # Admitted, then preempted and requeued: legitimately back in line (with
            # release_on_preempt the requeue is the 'preempted' event itself).
            assert last in ("requeued", "preempted"), (wid, state, history[wid])
            assert not everything[wid]["placement"], wid


def carry_on(s: Scheduler, acks: Acks) -> None:
    """The recovered scheduler works: a submission and a cycle, then the checks again."""
    now = (s.engine.fairshare.time or 0.0) + 10.0
    w = s.submit({"user": "ada", "queue": "team-a", "kind": "batch", "resources": {"gpu": 1}}, now=now)
    acks.submitted.add(w.id)
    for v in [v for v in s.state.holding.values() if v.state == PREEMPTING][:3]:
        s.mark_stopped(v.id, now=now)
    res = s.cycle(now=now + 1)
    acks.admitted.update(x.id for x in res.admitted)
    check_acks(s, check_consistent(s), acks)


def crash_rounds(url: str, tmp_path: Path, seed: int) -> Acks:
    """ROUNDS kills on one database, each followed by a restart and the checks.

    Round 0 kills during start-up on the empty database (migration, setup); odd
    rounds after a random 0.05-0.6 s of work; even rounds let the worker kill
    itself at a random store write inside a cycle's transaction (round 6: inside
    any transaction). Every third round runs with ``release_on_preempt``."""
    rng = random.Random(seed)
    acks = Acks()
    in_cycle_rounds = 0
    for r in range(ROUNDS):
        ack, log = tmp_path / f"acks{r}.txt", tmp_path / f"worker{r}.log"
        kw = dict(release=r % 3 == 2)
        if r == 0:
            kw.update(wait_ready=False, delay=rng.uniform(0.1, 0.8))
        elif r % 2 == 1:
            kw.update(delay=rng.uniform(0.05, 0.6))
        else:
            kw.update(die_at_write=rng.randint(1, 250), anywhere=r == 6)
            in_cycle_rounds += r != 6
        run_and_kill(url, seed * 100 + r, ack, log, **kw)
        in_cycle = acks.read(ack)
        acks.kills_in_cycle += in_cycle
        if kw.get("die_at_write") and not kw.get("anywhere"):
            assert in_cycle, "the worker was to kill itself inside a cycle"
        store = SqlStore(url)
        try:
            s = Scheduler(store)
            check_acks(s, check_consistent(s), acks)
            if ready(ack):
                carry_on(s, acks)
        finally:
            store.close()
    assert acks.kills_in_cycle >= in_cycle_rounds
    return acks


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_sqlite(tmp_path):
    acks = crash_rounds(f"sqlite:///{tmp_path / 'crash.sqlite'}", tmp_path, seed=11)
    assert len(acks.submitted) > 100 and len(acks.admitted) > 50   # the worker did real work
    print(f"sqlite: {len(acks.submitted)} submissions, {len(acks.admitted)} admissions acknowledged; "
          f"{acks.kills_in_cycle}/{ROUNDS} kills inside a cycle")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_postgres(pg_db_url, tmp_path):
    acks = crash_rounds(pg_db_url, tmp_path, seed=23)
    assert len(acks.submitted) > 100 and len(acks.admitted) > 50
    print(f"postgres: {len(acks.submitted)} submissions, {len(acks.admitted)} admissions acknowledged; "
          f"{acks.kills_in_cycle}/{ROUNDS} kills inside a cycle")


# --- a store write that fails inside a cycle's transaction ------------------------------

def picture(s: Scheduler) -> dict:
    """Everything of the in-memory state that must equal what a fresh load gives."""
    st = s.state
    return {
        "workloads": {w.id: (w.state, [(a.node, a.gpus) for a in w.placement], w.admitted_at,
                             w.started_at, w.preemptions, w.ended_at) for w in st.workloads.values()},
        "pending": sorted(st.pending), "holding": sorted(st.holding),
        "free": {n: sorted(node.free_gpus) for n, node in st.inventory.nodes.items()},
        "usage": {q: {k: v for k, v in u.items() if v} for q, u in st.tree.usage.items()},
        "fairshare": (s.engine.fairshare.time, s.engine.fairshare.snapshot()),
        "next_seq": s.next_seq,
    }


def db_counts(store: SqlStore) -> tuple:
    return (len(store.get_events()), len(store.get_allocations()),
            sorted((w.id, w.state) for w in store.get_workloads()), sorted(held_in_db(store)))


def busy(url: str, release: bool) -> tuple[Scheduler, float]:
    """A scheduler with running work, a queue of more, and a cycle that will preempt."""
    s = Scheduler(SqlStore(url), config=EngineConfig(release_on_preempt=release))
    setup(s, now=1.0)
    rng = random.Random(5)
    for i in range(40):
        s.submit({"user": rng.choice(["ada", "bob"]), "queue": rng.choice(["team-b", "team-c"]),
                  "kind": "batch", "resources": {"gpu": rng.choice([1, 2, 4])}}, now=2.0)
    res = s.cycle(now=3.0)
    assert res.admitted
    for w in res.admitted[::2]:
        s.mark_running(w.id, now=4.0)
    # Free some capacity, so the failing cycle both admits and preempts.
    for w in [w for w in res.admitted if w.queue == "team-c"][:3]:
        s.mark_finished(w.id, now=4.0)
    # team-a reclaims its guarantee from the borrowers; more batch work queues up.
    for i in range(4):
        s.submit({"user": f"u{i}", "queue": "team-a", "kind": "training", "resources": {"gpu": 2}}, now=5.0)
    for i in range(10):
        s.submit({"user": "cy", "queue": "team-c", "kind": "batch", "resources": {"gpu": 1}}, now=5.0)
    return s, 10.0


FAILURES = [("put_workloads", 1), ("open_allocation", 3), ("add_event", 3), ("put_fairshare", 1)]


@pytest.mark.parametrize("release", [False, True], ids=["wait", "release"])
@pytest.mark.parametrize("method,nth", FAILURES, ids=[f"{m}-{n}" for m, n in FAILURES])
def test_failure_inside_a_cycle_leaves_memory_equal_to_the_store(store_url, method, nth, release,
                                                                 monkeypatch):
    s, now = busy(store_url, release)
    try:
        before = db_counts(s.store)
        calls = {"n": 0}
        real = getattr(s.store, method)

        def failing(*a, **kw):
            calls["n"] += 1
            if calls["n"] == nth:
                raise RuntimeError(f"injected failure in {method} #{nth}")
            return real(*a, **kw)

        monkeypatch.setattr(s.store, method, failing)
        with pytest.raises(RuntimeError, match="injected failure"):
            s.cycle(now=now)
        assert calls["n"] == nth, "the cycle did not reach the failing write"
        monkeypatch.undo()
        # Nothing of the cycle is durable, and memory is exactly what the store holds.
        assert db_counts(s.store) == before
        fresh = Scheduler(SqlStore(store_url), config=EngineConfig(release_on_preempt=release))
        try:
            assert picture(s) == picture(fresh)
            assert violations(s.state) == []
        finally:
            fresh.store.close()
        check_consistent(s)
        # The same cycle, now without the failure, goes through and preempts.
        res = s.cycle(now=now)
        assert res.admitted and res.preempted
        check_consistent(s)
        fresh = Scheduler(SqlStore(store_url), config=EngineConfig(release_on_preempt=release))
        try:
            assert picture(s) == picture(fresh)
        finally:
            fresh.store.close()
    finally:
        s.store.close()
