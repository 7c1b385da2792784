"""The store on a real PostgreSQL server that stops answering with its connections left open
(``PgServer.pause``: every server process frozen with SIGSTOP, as a paused VM or a wedged
server; ``os.kill(backend, SIGSTOP)`` for one session). Nothing is emulated.

Without a bound, the driver waits in ``recv()`` for as long as the connection lasts: these
tests would hang. What must hold (``scheduler/store/watchdog.py``):

- a call is broken off after the store's ``timeout`` and raises ``StoreUnavailable`` saying
  so (a commit broken off is ``in_doubt``); a connection attempt is bounded too;
- while the server does not answer, calls fail at once instead of waiting again;
- once it answers, the store works again by itself, and what was committed is there;
- one session frozen (not the server) costs one call a ``timeout``, answered on a fresh
  connection.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from sqlalchemy import event

from scheduler import Scheduler, StoreUnavailable
from scheduler.store.sql import SqlStore

pytestmark = pytest.mark.postgres

TIMEOUT = 2.0
SLACK = 3.0         # a loaded CI machine's scheduling, on top of the bounds


def timed(fn):
    t0 = time.monotonic()
    try:
        return fn(), time.monotonic() - t0
    except StoreUnavailable as e:
        return e, time.monotonic() - t0


def backend_pid(store) -> int:
    with store._r() as c:
        return c.exec_driver_sql("SELECT pg_backend_pid()").scalar()


def test_frozen_server_is_broken_off_then_refused_fast_then_recovers(own_pg):
    s = Scheduler(SqlStore(own_pg.url, timeout=TIMEOUT))
    s.put_node({"name": "n0", "gpus": 4}, now=0)
    s.put_queue({"name": "a"}, now=0)
    kept = s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}}, now=1)
    own_pg.pause()
    try:
        out, took = timed(lambda: s.store.get_workload(kept.id))
        assert isinstance(out, StoreUnavailable), out
        assert f"did not answer within {TIMEOUT:g} s" in out.detail
        # The stuck call, then a fresh connection attempt (bounded by connect_timeout ≥ 2 s).
        assert took < 2 * TIMEOUT + SLACK, took

        out, took = timed(lambda: s.submit({"user": "ada", "queue": "a", "kind": "training",
                                            "resources": {"gpu": 1}}, now=2))
        assert isinstance(out, StoreUnavailable) and "trying it again" in out.detail, out
        assert took < 0.5, took          # refused at once, no second wait
        assert not out.in_doubt
    finally:
        own_pg.unpause()

    deadline = time.monotonic() + 15
    while True:
        out, _ = timed(lambda: s.store.get_workload(kept.id))
        if not isinstance(out, StoreUnavailable) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert out is not None and out.id == kept.id, out
    s.ensure_current()
    after = s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}}, now=3)
    fresh = SqlStore(own_pg.url, migrate=False)
    try:
        assert {w.id for w in fresh.get_workloads()} == {kept.id, after.id}
    finally:
        fresh.close()
        s.store.close()


def test_commit_to_a_frozen_session_is_in_doubt(own_pg):
    store = SqlStore(own_pg.url, timeout=TIMEOUT)
    s = Scheduler(store)
    s.put_node({"name": "n0", "gpus": 4}, now=0)
    s.put_queue({"name": "a"}, now=0)
    frozen = []

    def freeze(conn):           # just before COMMIT is sent, the session's server process stops
        if not frozen:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
    event.listen(store.engine, "commit", freeze)
    try:
        out, took = timed(lambda: s.submit({"user": "ada", "queue": "a", "kind": "training",
                                            "resources": {"gpu": 1}}, now=1))
        assert isinstance(out, StoreUnavailable), out
        assert out.in_doubt, "a commit broken off may have been made"
        assert TIMEOUT - 0.2 < took < TIMEOUT + SLACK, took
    finally:
        event.remove(store.engine, "commit", freeze)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    store.close()


def test_one_frozen_session_costs_one_call_a_timeout(own_pg):
    """Only this connection's server process stops: the pool's ping is broken off and a fresh
    connection answers the same call (the server itself is fine)."""
    store = SqlStore(own_pg.url, timeout=TIMEOUT)
    s = Scheduler(store)
    s.put_queue({"name": "a"}, now=0)
    pid = backend_pid(store)
    os.kill(pid, signal.SIGSTOP)
    try:
        out, took = timed(lambda: store.load())
        assert not isinstance(out, StoreUnavailable), out
        assert [q.name for q in out.queues] == ["a"]
        assert TIMEOUT - 0.2 < took < TIMEOUT + SLACK, took
        out, took = timed(lambda: store.load())
        assert took < 1.0, took
    finally:
        os.kill(pid, signal.SIGCONT)
        store.close()


def test_no_bound_when_zero_and_never_on_sqlite(own_pg, tmp_path):
    assert SqlStore(own_pg.url, timeout=0)._watchdog is None
    assert SqlStore(f"sqlite:///{tmp_path / 's.sqlite'}", timeout=TIMEOUT)._watchdog is None


def test_calls_at_start_and_on_worker_threads_may_take_their_time(own_pg):
    """``unbounded()``: a service reading a large state at start, or housekeeping on a worker
    thread, is not broken off; the same call outside it is."""
    store = SqlStore(own_pg.url, timeout=1.0)
    slow = "SELECT pg_sleep(1.6)"
    with store.unbounded():
        with store._r() as c:
            c.exec_driver_sql(slow)
    with pytest.raises(StoreUnavailable, match="did not answer within 1 s"):
        with store._r() as c:
            c.exec_driver_sql(slow)
    store.close()
