"""One ComputeHub service per database: a second ``computehub serve`` on the same database
refuses to start, and a service that lost the database to another stops deciding.

Real ``computehub serve`` processes (``python -m hub_ext serve``) on a real SQLite file and
the suite's real PostgreSQL server. No hub is needed for what is checked here (the hold is
taken before the service talks to the hub or serves anything), so none runs: the hub's API
URL points at nothing, as in test_config_errors.py. A service is "up" once it answers HTTP.
The PostgreSQL loss is made as it happens in life: the holder's lock connection is killed
(``pg_terminate_backend``) while a replacement waits for the database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests
from pg import free_port
from sqlalchemy import select

from scheduler import Scheduler
from scheduler.model import ADMITTED, PENDING
from scheduler.store import tables as T
from scheduler.store.exclusive import HOLD_APPLICATION_NAME, SERVICE_LOCK
from scheduler.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[2]
REFUSAL = "computehub: error: another ComputeHub service is using this database ("


class Service:
    """One ``computehub serve`` process; its stderr (the log) goes to a file."""

    def __init__(self, tmp_path: Path, name: str, db_url: str, config: str = ""):
        self.dir = tmp_path / name
        self.dir.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.dir / "c.py").write_text(config)
        env = dict(os.environ, PYTHONPATH=str(ROOT), JUPYTERHUB_API_TOKEN="t" * 32,
                   JUPYTERHUB_API_URL="http://127.0.0.1:9/hub/api")       # nothing answers there
        for k in ("JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_SERVICE_PREFIX", "COMPUTEHUB_DATA_DIR"):
            env.pop(k, None)
        self.log_path = self.dir / "stderr"
        with open(self.log_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hub_ext", "serve", f"--config={self.dir / 'c.py'}",
                 f"--data-dir={self.dir / 'data'}", f"--db-url={db_url}", f"--url={self.url}"],
                cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def serving(self) -> bool:
        try:
            return requests.get(self.url + "/services/computehub/nowhere", timeout=2).status_code == 404
        except requests.RequestException:
            return False

    def wait_serving(self, limit: float = 60) -> None:
        assert wait_for(lambda: self.serving() or self.proc.poll() is not None, limit) and self.serving(), \
            f"service {self.pid} is not serving (exit {self.proc.poll()}):\n{self.log()}"

    def exit_status(self, limit: float = 60) -> int:
        try:
            return self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            pytest.fail(f"service {self.pid} did not exit within {limit:.0f} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()


def wait_for(what, limit: float, every: float = 0.1):
    deadline = time.monotonic() + limit
    while True:
        out = what()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(every)


@pytest.fixture
def services():
    started: list[Service] = []
    yield started
    for s in started:
        s.stop()


def snapshot(url: str) -> dict:
    """What services decide: workloads, their events, allocations and GPU assignments."""
    st = SqlStore(url, migrate=False)
    try:
        with st.engine.connect() as c:
            return {t.name: sorted(map(repr, c.execute(select(t))))
                    for t in (T.workloads, T.events, T.allocations, T.gpu_assignments, T.meta)}
    finally:
        st.close()


def refused_by(second: Service, first: Service) -> str:
    assert second.exit_status() == 1, second.log()
    err = second.log().strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(REFUSAL) and err.endswith(f"{first.url}): stop it first"), err
    assert f"(pid {first.pid} on host " in err and " UTC, " in err, err
    return err


def one_refused_then_the_next_starts_once_the_first_is_killed(tmp_path, services, url, wait_after_kill):
    first = Service(tmp_path, "first", url)
    services.append(first)
    first.wait_serving()
    before = snapshot(url)
    second = Service(tmp_path, "second", url)
    services.append(second)
    refused_by(second, first)
    assert snapshot(url) == before                    # the refused one wrote nothing
    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait()
    third = Service(tmp_path, "third", url, f"c.ComputeHubService.other_service_wait = {wait_after_kill}\n")
    services.append(third)
    third.wait_serving()                              # the lock went with the killed process
    assert "Traceback" not in third.log(), third.log()
    return third


def test_sqlite_a_second_service_is_refused_and_a_kill_9_frees_the_database(tmp_path, services):
    url = f"sqlite:///{tmp_path / 'computehub.sqlite'}"
    third = one_refused_then_the_next_starts_once_the_first_is_killed(tmp_path, services, url, 0)
    assert "waiting up to" not in third.log(), third.log()      # at once: not even a wait


@pytest.mark.postgres
def test_postgresql_a_second_service_is_refused_and_a_kill_9_frees_the_database(tmp_path, services, pg_db_url):
    # The server ends the killed process's session as soon as its socket closes; the new one
    # may wait a moment for that (other_service_wait), never for a timeout.
    one_refused_then_the_next_starts_once_the_first_is_killed(tmp_path, services, pg_db_url, 30)


def hold_backend(port: int) -> int:
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True) as c:
        rows = c.execute("SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                         "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                         "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s", (SERVICE_LOCK,)).fetchall()
    assert len(rows) == 1 and rows[0][1] == HOLD_APPLICATION_NAME, rows
    return rows[0][0]


@pytest.mark.postgres
def test_postgresql_a_service_whose_hold_was_taken_stops_without_writing(tmp_path, services, pg_server):
    url = pg_server.create_database()
    seed = Scheduler(SqlStore(url))
    seed.put_node({"name": "n0", "gpus": 2})
    seed.put_queue({"name": "q", "guaranteed": {"gpu": 2}})
    w = seed.submit({"user": "ada", "queue": "q", "name": "w1", "resources": {"gpu": 1}})
    seed.store.close()
    # The first service's first cycle comes 10 s after it serves; it is frozen before that, so
    # w1 is pending in its memory: woken after the second admitted w1, it would admit it again.
    first = Service(tmp_path, "first", url, "c.ComputeHubService.cycle_delay = 10\n")
    services.append(first)
    first.wait_serving()
    os.kill(first.pid, signal.SIGSTOP)
    st = SqlStore(url, migrate=False)
    assert st.get_workload(w.id).state == PENDING, "the first service cycled before it was frozen"
    second = Service(tmp_path, "second", url, "c.ComputeHubService.other_service_wait = 120\n")
    services.append(second)
    assert wait_for(lambda: "waiting up to" in second.log(), 60), second.log()
    assert "another ComputeHub service is using this database" in second.log()
    assert f"pid {first.pid} on host " in second.log() and not second.serving()
    with psycopg.connect(host="127.0.0.1", port=pg_server.port, user="postgres", dbname="postgres",
                         autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s)", (hold_backend(pg_server.port),))
    second.wait_serving()                             # the second has the database now
    assert wait_for(lambda: st.get_workload(w.id).state == ADMITTED, 60), "the second service did not admit w1"
    st.close()
    decided = snapshot(url)
    os.kill(first.pid, signal.SIGCONT)                # its cycle is due: it finds the hold gone
    assert first.exit_status() == 1, first.log()
    lines = [ln for ln in first.log().splitlines() if "lost the database" in ln]
    assert len(lines) == 1, first.log()
    assert f"this service lost the database to another ComputeHub service (pid {second.pid} on host " in lines[0]
    assert lines[0].endswith(f"{second.url}): it stops scheduling and exits"), lines[0]
    assert "Traceback" not in first.log(), first.log()
    assert snapshot(url) == decided                   # nothing of the second's work changed by the first
    assert second.proc.poll() is None and second.serving()
