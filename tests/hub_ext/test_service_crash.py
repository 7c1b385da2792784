"""kill -9 of the managed service under concurrent submissions, on SQLite and PostgreSQL.

A real JupyterHub, the real configurable-http-proxy and the service as a hub
MANAGED service (the hub restarts it when it exits). Nothing is emulated: eight
client threads, each with its own hub token, submit through the proxy while a
"launcher" thread (the hub service with submit-on-behalf) plays the workloads'
runtime, marking admitted work running and then finished so that GPUs change
hands all the time. The test SIGKILLs the service process twice, each time
waiting for the hub to notice and start it again, then checks through the API
and directly in the database that:

* every submission acknowledged with a 2xx is there, once (by id and by name);
* no submission is half there: every workload row has exactly one 'submitted'
  event and every 'submitted' event its workload (a submission that got an
  error or lost its connection is either wholly present or absent);
* no GPU is held twice: ``gpu_assignments`` matches the placements of the work
  that holds GPUs, and ``violations()`` of a freshly loaded Scheduler is empty;
* the service works after the restarts: a new submission gets 201 and a cycle
  admits it.

The figures (acknowledged, failed, failures that nevertheless committed,
restart times) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time

import pytest
import requests
from sqlalchemy import select

from realhub import RealHub
from scheduler import Scheduler
from scheduler.invariants import violations
from scheduler.model import HOLDING
from scheduler.store import tables as T
from scheduler.store.sql import SqlStore

STATES = ("awaiting_approval", "pending", "admitted", "running", "preempting", "cancelling", "reclaiming",
          "finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")
# (user, queue) of the eight clients: queues each user may use.
CLIENTS = [("alice", "vision"), ("bob", "vision"), ("carol", "nlp"), ("lin", "vision"),
           ("ada", "nlp"), ("alice", "vision"), ("carol", "nlp"), ("ada", "vision")]
KILLS = 2          # each waits up to ~30 s for the hub to notice (its poll of managed services)
# What the launcher reports for work in each state: it starts, runs, and stops when preempted.
NEXT = {"admitted": "running", "running": "finished", "preempting": "stopped"}
RESTART_LIMIT = 60.0      # the hub polls managed services every ~30 s (Spawner.poll_interval)


class Client(threading.Thread):
    """Submits in a loop; records every outcome by the submission's unique name."""

    def __init__(self, hub: RealHub, n: int, user: str, queue: str, token: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.hub, self.n, self.user, self.queue, self.token, self.stop = hub, n, user, queue, token, stop
        self.ok: dict[str, str] = {}                # name -> id
        self.failed: dict[str, str] = {}            # name -> status code or exception
        self.refused: dict[str, str] = {}           # name -> 4xx body (a bug here)
        self.last_ok = 0.0                          # time.monotonic() of the last acknowledgement

    def run(self):
        s = requests.Session()
        s.headers["Authorization"] = f"token {self.token}"
        i = 0
        while not self.stop.is_set():
            name = f"c{self.n}-{i}"
            i += 1
            body = {"name": name, "queue": self.queue, "resources": {"gpu": 1, "cpu": 1, "memory": "1Gi"},
                    "node_selector": {"zone": "east" if i % 2 else "west"}}
            try:
                r = s.post(self.hub.api + "/workloads", json=body, timeout=15)
            except requests.RequestException as e:
                self.failed[name] = type(e).__name__
                time.sleep(0.2)
                continue
            if 200 <= r.status_code < 300:
                self.ok[name] = r.json()["id"]
                self.last_ok = time.monotonic()
                time.sleep(0.02)           # ~tens of submissions/s per client: keeps pending bounded
            elif 400 <= r.status_code < 500:
                self.refused[name] = f"{r.status_code} {r.text[:200]}"
            else:
                self.failed[name] = str(r.status_code)
                time.sleep(0.2)


class Launcher(threading.Thread):
    """Plays the runtime: admitted work starts, then finishes; preempted work stops. GPUs keep
    changing hands."""

    def __init__(self, hub: RealHub, stop: threading.Event):
        super().__init__(daemon=True)
        self.hub, self.stop, self.finished = hub, stop, 0

    def run(self):
        s = requests.Session()
        s.headers["Authorization"] = f"token {self.hub.launcher_token}"
        while not self.stop.is_set():
            try:
                r = s.get(self.hub.api + "/workloads", params={"state": list(NEXT), "limit": 100}, timeout=15)
                ws = r.json()["workloads"] if r.status_code == 200 else []
                for w in ws:
                    st = NEXT[w["state"]]
                    r = s.post(f"{self.hub.api}/workloads/{w['id']}/status", json={"state": st}, timeout=15)
                    self.finished += st == "finished" and r.status_code == 200
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.2)


def wait_serving(hub: RealHub, old_pid: int, limit: float) -> tuple[float, float, int]:
    """Seconds from the kill until the hub started a new process, and until it answered."""
    t0 = time.monotonic()
    started = None
    pid = None
    while time.monotonic() - t0 < limit:
        pid = hub.service_pid()
        if pid and pid != old_pid:
            started = started or time.monotonic() - t0
            try:
                if hub.call("GET", "/me", hub.tokens["ada"], timeout=2).status_code == 200:
                    return started, time.monotonic() - t0, pid
            except requests.RequestException:
                pass
        time.sleep(0.1)
    pytest.fail(f"the hub did not restart the managed service within {limit:.0f} s of kill -9 "
                f"(new process: {'started after %.1f s' % started if started else 'none'}; pid now {pid}).\n"
                f"hub log tail:\n{hub.tail()}")


def api_workloads(hub: RealHub) -> list[dict]:
    out, offset = [], 0
    while True:
        r = hub.call("GET", "/workloads", hub.tokens["ada"], timeout=60,
                     params={"state": list(STATES), "limit": 10000, "offset": offset})
        assert r.status_code == 200, r.text
        page = r.json()
        out += page["workloads"]
        offset += len(page["workloads"])
        if offset >= page["total"] or not page["workloads"]:
            return out


def db_snapshot(url: str):
    """Workloads, 'submitted' events and GPU assignments, read in ONE consistent snapshot."""
    store = SqlStore(url, migrate=False)
    try:
        with store.engine.connect() as c:
            if store.dialect == "postgresql":
                c.execution_options(isolation_level="REPEATABLE READ")
            wl, ev, ga = T.workloads, T.events, T.gpu_assignments
            rows = c.execute(select(wl.c.id, wl.c.state, wl.c.data)).all()
            submitted = c.execute(select(ev.c.workload_id).where(ev.c.kind == "submitted")).scalars().all()
            assigned = c.execute(select(ga.c.node, ga.c.gpu_index, ga.c.workload_id)).all()
            c.rollback()
    finally:
        store.close()
    return rows, submitted, assigned


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_kill_9_under_concurrent_submissions(db, tmp_path, request):
    db_url = request.getfixturevalue("pg_db_url") if db == "postgres" else None
    hub = RealHub(tmp_path, db_url=db_url)
    try:
        hub.start()
        url = db_url or f"sqlite:///{hub.data_dir / 'computehub.sqlite'}"
        stop = threading.Event()
        clients = [Client(hub, n, user, queue, hub.make_token(user), stop)
                   for n, (user, queue) in enumerate(CLIENTS)]
        launcher = Launcher(hub, stop)
        for t in clients + [launcher]:
            t.start()

        restarts = []
        try:
            for _ in range(KILLS):
                time.sleep(5)                          # let submissions and admissions flow
                pid = hub.service_pid()
                assert pid, "no service process to kill"
                os.kill(pid, signal.SIGKILL)
                restarts.append(wait_serving(hub, pid, RESTART_LIMIT))
            serving_again = time.monotonic()
            time.sleep(3)                              # submissions succeed again after the last restart
        finally:
            stop.set()
            for t in clients + [launcher]:
                t.join(30)

        ok = {name: wid for c in clients for name, wid in c.ok.items()}
        failed = {name: why for c in clients for name, why in c.failed.items()}
        refused = {name: why for c in clients for name, why in c.refused.items()}
        assert not refused, f"valid submissions refused: {list(refused.items())[:5]}"
        assert max(c.last_ok for c in clients) > serving_again, "no submission succeeded after the last restart"

        # --- the API's view (as the admin) ---------------------------------------------
        listed = api_workloads(hub)
        api_ids = collections.Counter(w["id"] for w in listed)
        api_names = collections.Counter(w["name"] for w in listed)
        assert not [i for i, n in api_ids.items() if n > 1], "the API lists a workload twice"

        # --- the database's view ---------------------------------------------------------
        rows, submitted, assigned = db_snapshot(url)
        by_id = {r.id: r for r in rows}
        names = collections.Counter(r.data.get("name") for r in rows)
        events = collections.Counter(submitted)

        lost = [(n, i) for n, i in ok.items() if i not in by_id or by_id[i].data.get("name") != n]
        assert not lost, f"{len(lost)} acknowledged submissions are missing or wrong: {lost[:5]}"
        twice = [n for n in ok if names[n] != 1]
        assert not twice, f"acknowledged submissions stored more than once: {twice[:5]}"
        assert not [n for n in failed if names[n] > 1], "a failed submission was stored twice"
        assert set(api_ids) == set(by_id), "the API's list differs from the database"
        assert all(api_names[n] == 1 for n in ok), "an acknowledged submission is not listed once"

        half = [i for i in by_id if events[i] != 1] + [i for i in events if i not in by_id]
        assert not half, f"workloads without exactly one 'submitted' event, or events without workload: {half[:5]}"

        held = {}
        for r in rows:
            if r.state in HOLDING:
                for a in r.data.get("placement") or []:
                    for g in a["gpus"]:
                        assert (a["node"], g) not in held, f"GPU {a['node']}/{g} placed twice"
                        held[(a["node"], g)] = r.id
        table = {(n, g): w for n, g, w in assigned}
        assert len(table) == len(assigned)
        assert table == held, "gpu_assignments disagrees with the placements of work that holds GPUs"

        store = SqlStore(url, migrate=False)
        try:
            assert violations(Scheduler(store).state) == []
        finally:
            store.close()

        # --- still working: a new submission is accepted and admitted --------------------
        r = hub.call("PUT", "/nodes/gpu-c", hub.tokens["ada"],
                     json={"gpus": 4, "gpu_model": "a100", "cpu": 32, "memory": "256Gi", "labels": {"zone": "north"}})
        assert r.status_code in (200, 201), r.text
        r = hub.call("POST", "/workloads", hub.tokens["carol"],
                     json={"name": "after-kills", "queue": "nlp", "resources": {"gpu": 1},
                           "node_selector": {"zone": "north"}})
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            w = hub.call("GET", f"/workloads/{wid}", hub.tokens["carol"]).json()
            if w["state"] == "admitted":
                break
            time.sleep(0.2)
        assert w["state"] == "admitted", w

        committed_anyway = sorted(n for n in failed if names[n] == 1)
        kinds = collections.Counter(failed.values())
        print(f"\n[{db}] acknowledged {len(ok)}, failed {len(failed)} ({dict(kinds)}), "
              f"failed but committed {len(committed_anyway)}, finished by the launcher {launcher.finished}, "
              f"workloads in the database {len(rows)}, GPUs held {len(held)}; restarts "
              + ", ".join(f"new process after {s:.1f} s, serving after {t:.1f} s" for s, t, _ in restarts))
        assert failed, "the kills should have failed some submissions"
    finally:
        hub.stop()
