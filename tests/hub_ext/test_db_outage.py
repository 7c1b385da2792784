"""The service's database going away while it runs (the kill -9 tests cover the service going away).

Real JupyterHub, proxy and service (realhub.py); a real PostgreSQL server of the test's own
(``PgServer``), halted and resumed on the same port, or its connections killed with
``pg_terminate_backend``; for SQLite, the data folder on a real 4 MiB tmpfs that is filled up.
Nothing is emulated. What must hold, each time:

- callers get a clear 503 ``{"error": "database_unavailable", "message"}``, never a 500, and
  never a 201 for work that was not written; reads of live work go on from memory, which
  holds only what is durable;
- the service recovers by itself when the database is back (same process, no restart);
- afterwards every workload that got a 201 is stored exactly once, those told "nothing was
  accepted" are not, every GPU is held once, and the API (memory) agrees with the database.

The last test drives the group commit in-process (as test_group_commit does) to reach the
moment a batch is being committed (SQLAlchemy's ``commit`` event, just before COMMIT is sent).
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import psycopg
import pytest
import requests
from realhub import RealHub
from sqlalchemy import event, select

from hub_ext.app import ComputeHubService
from hub_ext.base import APIError
from scheduler.model import HOLDING
from scheduler.store import tables as T
from scheduler.store.sql import SqlStore

NOTHING = "nothing was accepted"



class Calls:
    """Every answer the service gave, checked for shape as it comes."""

    def __init__(self, hub):
        self.hub, self.accepted, self.refused, self.statuses = hub, {}, set(), []
        self.lock = threading.Lock()

    def call(self, method, path, token, **kw):
        r = self.hub.call(method, path, token, **kw)
        with self.lock:
            self.statuses.append(r.status_code)
        assert r.status_code in (200, 201, 409, 503), (method, path, r.status_code, r.text)
        body = r.json()
        if r.status_code == 503:
            assert set(body) == {"error", "message"} and body["error"] == "database_unavailable", body
        return r

    def submit(self, token, name, queue, gpus=1, **kw):
        r = self.call("POST", "/workloads", token, json={"name": name, "queue": queue, "resources": {"gpu": gpus},
                                                          **kw})
        with self.lock:
            if r.status_code == 201:
                self.accepted[r.json()["id"]] = name
            elif NOTHING in r.json()["message"]:
                self.refused.add(name)
        return r


def wait_for(what, timeout=20.0, every=0.2):
    deadline = time.monotonic() + timeout
    while True:
        out = what()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(every)


def recovered(calls, token, queue):
    """The service takes work again by itself (polled: the first tries may still get 503)."""
    n = iter(range(10**6))
    return wait_for(lambda: calls.submit(token, f"after-{next(n)}", queue).status_code == 201)


def check_consistent(hub, calls, store_url):
    """Every 201 stored once; no refused one stored; GPUs held once; the API is the database."""
    st = SqlStore(store_url, migrate=False)
    try:
        stored = {w.id: w for w in st.get_workloads()}
        with st.engine.connect() as c:
            ga = sorted(tuple(r) for r in c.execute(select(T.gpu_assignments.c.node, T.gpu_assignments.c.gpu_index,
                                                           T.gpu_assignments.c.workload_id)))
    finally:
        st.close()
    names = [w.name for w in stored.values()]
    assert len(names) == len(set(names))                         # each submission at most once
    assert {i: stored[i].name for i in calls.accepted if i in stored} == calls.accepted
    assert not calls.refused & set(names), calls.refused & set(names)
    assert len({(n, g) for n, g, _ in ga}) == len(ga)
    from_db = sorted((a.node, g, w.id) for w in stored.values() if w.state in HOLDING for a in w.placement
                     for g in a.gpus)
    assert ga == from_db
    admin, shown = hub.tokens["ada"], []
    for w in stored.values():                                    # the API answers from memory
        r = hub.call("GET", f"/workloads/{w.id}", admin)
        assert r.status_code == 200 and r.json()["state"] == w.state, (w.id, w.state, r.text[:300])
        shown += [(a["node"], g, w.id) for a in r.json()["placement"] for g in a["gpus"]] \
            if w.state in HOLDING else []
    assert sorted(shown) == ga
    return stored


@pytest.mark.slow
@pytest.mark.postgres
def test_postgresql_down_for_seconds_then_back(tmp_path, own_pg):
    url = own_pg.create_database()
    # A cycle comes 2 s after a change: the one for "late" runs while the server is down.
    slow = "\nc.ComputeHubService.cycle_interval = 1\nc.ComputeHubService.cycle_delay = 2\n"
    with RealHub(tmp_path, db_url=url, extra_service_config=slow) as hub:
        pid = hub.service_pid()
        alice, carol, ada, launcher = hub.tokens["alice"], hub.tokens["carol"], hub.tokens["ada"], hub.launcher_token
        calls = Calls(hub)
        first = calls.submit(alice, "first", "vision", 2).json()["id"]
        assert wait_for(lambda: calls.call("GET", f"/workloads/{first}", alice).json()["state"] == "admitted")
        late = calls.submit(carol, "late", "nlp", 2).json()["id"]
        own_pg.halt()
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < 6:
            n += 1
            assert calls.submit(carol, f"during-{n}", "nlp").status_code == 503
            assert calls.call("DELETE", f"/workloads/{first}", alice).status_code == 503
            assert calls.call("POST", f"/workloads/{first}/status", launcher, json={"state": "running"}) \
                .status_code == 503
            assert calls.call("GET", "/audit", ada).status_code == 503
            # Live work is still shown, as the database has it: "late" was not admitted, as its
            # cycle could not be made durable (it used to show admitted, on GPUs nobody had).
            r = calls.call("GET", f"/workloads/{late}", carol)
            assert r.status_code == 200 and r.json()["state"] == "pending" and r.json()["placement"] == []
            assert calls.call("GET", f"/workloads/{first}", alice).json()["state"] == "admitted"
            # The landing page shows her live work; only her ended work waits for the database.
            page = requests.get(hub.service_url + "/", headers={"Authorization": f"token {alice}"}, timeout=10)
            assert page.status_code == 200 and first in page.text, page.status_code
            assert "Your ended work cannot be shown now" in page.text, page.text
            time.sleep(0.3)
        assert len(calls.refused) == n

        own_pg.resume()
        assert recovered(calls, carol, "nlp")
        assert wait_for(lambda: calls.call("GET", f"/workloads/{late}", carol).json()["state"] == "admitted")
        assert calls.call("POST", f"/workloads/{first}/status", launcher, json={"state": "running"}).status_code == 200
        assert calls.call("DELETE", f"/workloads/{first}", alice).status_code == 200
        stored = check_consistent(hub, calls, url)
        assert stored[first].state == "cancelled" and stored[late].state == "admitted"
        assert hub.service_pid() == pid                          # recovered without a restart
        assert 500 not in calls.statuses
        assert "database answers again" in hub.tail(200_000)


@pytest.mark.slow
@pytest.mark.postgres
def test_connections_killed_under_load(tmp_path, own_pg):
    url = own_pg.create_database()
    with RealHub(tmp_path, db_url=url) as hub:
        pid = hub.service_pid()
        calls, stop, killed = Calls(hub), threading.Event(), []
        dbname = url.rsplit("/", 1)[1]

        def killer():
            with psycopg.connect(host="127.0.0.1", port=own_pg.port, user="postgres", dbname="postgres",
                                 autocommit=True) as c:
                while not stop.is_set():
                    rows = c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                     "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)).fetchall()
                    killed.extend(r for r in rows if r[0])
                    time.sleep(0.03)

        failures = []

        def client(user, queue):
            token, mine = hub.tokens[user], []
            try:
                for i in range(40):
                    r = calls.submit(token, f"{user}-{i}", queue)
                    if r.status_code == 201:
                        mine.append(r.json()["id"])
                    if i % 3 == 2 and mine:             # cancel some; a cycle may be admitting them
                        calls.call("DELETE", f"/workloads/{mine.pop(0)}", token)
            except Exception as e:      # noqa: BLE001 - reported by the test's thread
                failures.append(e)

        workers = [threading.Thread(target=client, args=a) for a in (("alice", "vision"), ("bob", "vision"),
                                                                        ("carol", "nlp"))]
        k = threading.Thread(target=killer)
        k.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join(60)
        stop.set()
        k.join(10)
        assert not failures, failures
        assert killed, "no connection of the service was killed"
        assert recovered(calls, hub.tokens["carol"], "nlp")
        time.sleep(1.5)                                  # a cycle or two after the last change
        check_consistent(hub, calls, url)
        assert hub.service_pid() == pid and 500 not in calls.statuses
        assert len(calls.accepted) > 20


@pytest.mark.slow
def test_sqlite_disk_full_then_freed(tmp_path):
    hub = RealHub(tmp_path)
    hub.data_dir.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(hub.data_dir)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"this test mounts a small tmpfs as the data folder (needs root): {res.stderr.strip()}")
    filler = hub.data_dir / "filler"
    try:
        hub.start()
        alice, calls = hub.tokens["alice"], Calls(hub)
        first = calls.submit(alice, "first", "vision").json()["id"]
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        blob = {"blob": "x" * 100_000}                   # grows the write-ahead log past what is left
        for i in range(8):
            calls.submit(alice, f"full-{i}", "vision", metadata=blob)
        assert len(calls.refused) >= 6, calls.statuses
        assert calls.call("DELETE", f"/workloads/{first}", alice).status_code in (200, 503)
        assert calls.call("GET", "/workloads", alice).status_code == 200
        filler.unlink()
        assert recovered(calls, alice, "vision")
        calls.call("DELETE", f"/workloads/{first}", alice)
        time.sleep(1.5)
        stored = check_consistent(hub, calls, f"sqlite:///{hub.data_dir / 'computehub.sqlite'}")
        assert stored[first].state == "cancelled" and 500 not in calls.statuses
    finally:
        hub.stop()
        subprocess.run(["umount", "-l", str(hub.data_dir)], capture_output=True)


@pytest.mark.postgres
@pytest.mark.parametrize("on_thread", [False, True])
def test_group_commit_tells_every_waiting_submitter_the_truth(tmp_path, own_pg, on_thread):
    url = own_pg.create_database()
    svc = ComputeHubService(data_dir=str(tmp_path), db_url=url, service_prefix="/services/computehub/",
                            nodes=[{"name": "n0", "gpus": 8}], initial_queues=[{"name": "a"}],
                            write_on_thread=on_thread)
    svc.initialize([])
    store = svc.sched.store

    def burst(names):
        async def run():
            return await asyncio.gather(*(svc.submit({"user": "ada", "queue": "a", "name": n,
                                                      "resources": {"gpu": 1}}) for n in names),
                                        return_exceptions=True)
        return asyncio.run(run())

    def agree():
        return {w.id for w in svc.sched.workloads()} == {w.id for w in store.get_workloads()}

    first = burst(["first"])[0]
    armed = [True]

    @event.listens_for(store.engine, "commit")
    def kill(conn):                 # the connection of the batch's transaction dies as it commits
        if armed and armed.pop():
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with psycopg.connect(host="127.0.0.1", port=own_pg.port, user="postgres", dbname="postgres",
                                 autocommit=True) as c:
                c.execute("SELECT pg_terminate_backend(%s)", (pid,))

    out = burst([f"doubt-{i}" for i in range(5)])
    for e in out:                   # all five told the same: it may or may not have been accepted
        assert isinstance(e, APIError) and e.status_code == 503 and e.code == "database_unavailable", e
        assert "may or may not have been accepted" in e.message
    assert agree() and not svc.sched.stale       # memory was rebuilt from the database at once

    own_pg.halt()
    out = burst([f"down-{i}" for i in range(5)])
    for e in out:                   # the server was down before anything was sent: nothing was accepted
        assert isinstance(e, APIError) and e.status_code == 503 and NOTHING in e.message, e
    own_pg.resume()
    again = burst(["again"])[0]
    assert again.name == "again" and again.seq > first.seq and agree()
    assert [w.name for w in store.get_workloads()] == ["first", "again"]
    store.close()
