"""One service per database: ``SqlStore.hold_exclusively`` (scheduler/store/exclusive.py).

Real SQLite files and a real PostgreSQL server (the session's, or one of the test's own that
is halted and resumed); nothing is emulated. Two stores in one process stand for two
services: a ``flock`` and a PostgreSQL session lock are both per open file or session, not
per process. Other stores on the same database (migrations, ``computehub simulate``, tools)
take no hold and are not held up by one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest
from sqlalchemy import select

from scheduler import Scheduler, StoreUnavailable
from scheduler.model import PENDING
from scheduler.store import tables as T
from scheduler.store.exclusive import (HOLD_APPLICATION_NAME, HeldElsewhere, LostExclusivity, describe_holder,
                                       holder_record)
from scheduler.store.sql import SqlStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def held(url: str, who: str) -> SqlStore:
    s = SqlStore(url, migrate=False)
    s.hold_exclusively(holder_record(f"http://{who}"))
    return s


def refused(url: str, who: str) -> HeldElsewhere:
    s = SqlStore(url, migrate=False)
    try:
        with pytest.raises(HeldElsewhere) as e:
            s.hold_exclusively(holder_record(f"http://{who}"))
    finally:
        s.close()
    return e.value


def rows(url: str) -> dict:
    s = SqlStore(url, migrate=False)
    try:
        with s.engine.connect() as c:
            return {t.name: sorted(map(tuple, c.execute(select(t)))) for t in (T.meta, T.workloads, T.events)}
    finally:
        s.close()


def terminate(pg_port: int, backend_pid: int) -> None:
    with psycopg.connect(host="127.0.0.1", port=pg_port, user="postgres", dbname="postgres", autocommit=True) as c:
        name = c.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s", (backend_pid,)).fetchone()
        assert name == (HOLD_APPLICATION_NAME,), name
        c.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))
        for _ in range(100):        # gone from the server (and its lock with it)
            if not c.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend_pid,)).fetchone():
                return
            time.sleep(0.05)


def test_a_second_holder_is_refused_told_who_and_writes_nothing(store_url):
    first = held(store_url, "first:10101")
    before = rows(store_url)
    e = refused(store_url, "second:10102")
    assert str(e).startswith("another ComputeHub service is using this database (")
    assert f"pid {os.getpid()} on host " in str(e) and "http://first:10101" in str(e) and " UTC" in str(e)
    assert rows(store_url) == before                  # the refused one recorded nothing
    other = SqlStore(store_url)                       # a tool, a migration, a test: no hold, no refusal
    with other.transaction():
        other.set_meta("tool", "was here")
    other.close()
    with first.transaction():                         # the holder writes on
        first.set_meta("service", "too")
    first.close()                                     # a service that stops lets go
    second = held(store_url, "second:10102")
    assert second.holder()["url"] == "http://second:10102"
    second.close()


def test_a_successor_starting_the_moment_its_predecessor_closes_is_never_refused(store_url):
    """A restart: the next service takes the database at once. PostgreSQL frees a closed
    session's locks only when its backend has exited, so closing unlocks first."""
    for i in range(40):
        s = held(store_url, f"svc:{i}")
        s.close()


def test_in_memory_sqlite_needs_no_hold():
    s = SqlStore("sqlite://", migrate=False)
    s.hold_exclusively(holder_record("http://memory"))
    with s.transaction():
        s.set_meta("k", "v")
    assert s.get_meta("k") == "v" and s.holder()["url"] == "http://memory"
    s.close()


def test_sqlite_kill_9_of_the_holder_lets_the_next_one_in_at_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code = textwrap.dedent(f"""
        import sys, time
        from scheduler.store.exclusive import holder_record
        from scheduler.store.sql import SqlStore
        SqlStore({url!r}, migrate=False).hold_exclusively(holder_record("http://doomed"))
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert proc.stdout.readline().strip() == "held"
        assert f"pid {proc.pid} " in str(refused(url, "next"))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    held(url, "next").close()                         # the kernel let go of the lock with the process
    assert os.path.exists(tmp_path / "db.sqlite.lock")


def test_sqlite_a_lock_file_that_cannot_be_made_is_an_unavailable_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    SqlStore(url).close()
    os.mkdir(tmp_path / "db.sqlite.lock")             # something that is no file is in the way
    s = SqlStore(url, migrate=False)
    with pytest.raises(StoreUnavailable, match="lock file"):
        s.hold_exclusively(holder_record())
    s.close()


@pytest.mark.postgres
def test_postgresql_a_hold_whose_connection_was_killed_is_taken_again_before_writing(pg_server):
    url = pg_server.create_database()
    first = held(url, "first")
    old = first.hold_backend_pid()
    terminate(pg_server.port, old)
    with first.transaction():                         # nobody took it meanwhile: taken again, then written
        first.set_meta("k", "v")
    assert first.hold_backend_pid() not in (None, old)
    assert "http://first" in str(refused(url, "second"))
    first.close()


@pytest.mark.postgres
def test_postgresql_a_hold_taken_by_another_is_lost_for_good_and_nothing_more_is_written(pg_server):
    url = pg_server.create_database()
    first = Scheduler(held(url, "first"))
    first.put_node({"name": "n0", "gpus": 2}, now=0)
    first.put_queue({"name": "q"}, now=0)
    w = first.submit({"user": "ada", "queue": "q", "resources": {"gpu": 1}}, now=1)
    terminate(pg_server.port, first.store.hold_backend_pid())
    second = held(url, "second")
    before = rows(url)
    for attempt in range(2):                          # and every later write too
        with pytest.raises(LostExclusivity) as e:
            first.cycle(now=2)
        assert "lost the database to another ComputeHub service" in str(e.value)
        assert "http://second" in str(e.value) and "http://first" not in str(e.value)
        assert isinstance(e.value, StoreUnavailable) and not e.value.in_doubt
    with pytest.raises(LostExclusivity):
        first.submit({"user": "ada", "queue": "q", "resources": {"gpu": 1}}, now=3)
    assert rows(url) == before                        # nothing of the first's was written
    assert first.get(w.id).state == PENDING and not first.stale   # and its memory was not changed
    assert describe_holder(second.holder()).endswith("http://second")
    first.store.close()
    second.close()


@pytest.mark.postgres
def test_postgresql_restart_is_an_outage_then_the_hold_is_taken_again(own_pg):
    url = own_pg.create_database()
    first = held(url, "first")
    own_pg.halt()
    with pytest.raises(StoreUnavailable) as e:        # down: a plain outage, nothing was changed
        with first.transaction():
            first.set_meta("k", "down")
    assert not isinstance(e.value, LostExclusivity) and not e.value.in_doubt
    own_pg.resume()
    with first.transaction():                         # back: held again before the write
        first.set_meta("k", "back")
    assert first.get_meta("k") == "back"
    assert "http://first" in str(refused(url, "second"))
    first.close()
    held(url, "second").close()


@pytest.mark.postgres
def test_postgresql_a_write_begun_before_the_hold_was_lost_lands_before_the_next_holder_begins(pg_server):
    """The gap ``_check_hold`` leaves: it looked, the hold was fine, then the hold's connection
    broke and another service took the database while this transaction was still open. The
    fence (the holder record, read with a share lock first in the transaction) makes the
    other one's record wait for this commit, and this one's next write fail."""
    import threading

    url = pg_server.create_database()
    first = Scheduler(held(url, "first"))
    first.put_node({"name": "n0", "gpus": 2}, now=0)
    first.put_queue({"name": "q"}, now=0)
    took_over = threading.Event()
    second: list = []
    with first.store.transaction():
        first.store.set_meta("probe", "written by first")
        terminate(pg_server.port, first.store.hold_backend_pid())
        threading.Thread(target=lambda: (second.append(held(url, "second")), took_over.set()),
                         daemon=True).start()
        # Without the fence the second records itself (and could decide) while this is open.
        assert not took_over.wait(1.5), "the next holder began before this transaction ended"
    assert took_over.wait(15)
    assert describe_holder(second[0].holder()).endswith("http://second")
    with pytest.raises(LostExclusivity) as e:
        first.submit({"user": "ada", "queue": "q", "resources": {"gpu": 1}}, now=3)
    assert "http://second" in str(e.value)
    first.store.close()
    second[0].close()
