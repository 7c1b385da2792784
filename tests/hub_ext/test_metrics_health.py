"""/metrics tells an operator when the service's database or JupyterHub's API is away and when
scheduling stopped, and goes on answering meanwhile.

Real JupyterHub, proxy and service (realhub.py) on a real PostgreSQL server of the test's own,
halted and started again (as test_db_outage.py does); the hub's absence is a port nobody
listens on (as test_hub_outage.py does); memory waiting to be read back from the database is
reached for real, by stopping PostgreSQL while a transaction commits. Nothing is emulated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from realhub import RealHub, free_port
from sqlalchemy import event
from test_metrics_waiting import scrape, value, wait_for

from hub_ext.app import ComputeHubService
from scheduler.engine import Engine
from scheduler.errors import StoreUnavailable
from scheduler.store.exclusive import LostExclusivity

UP, LAST = "computehub_database_up", "computehub_scheduling_cycle_last_success_timestamp_seconds"
UNAVAILABLE = "computehub_unavailable_responses_total"
FAILURES = "computehub_scheduling_cycle_failures_total"


@pytest.mark.slow
@pytest.mark.postgres
def test_the_database_going_away_and_coming_back_is_seen_on_metrics(tmp_path, own_pg):
    with RealHub(tmp_path, db_url=own_pg.create_database()) as hub:
        ada, carol = hub.tokens["ada"], hub.tokens["carol"]
        s = wait_for(lambda: (s := scrape(hub, ada)) and value(s, LAST) and s)
        assert value(s, UP) == 1 and value(s, UNAVAILABLE, error="database_unavailable") == 0
        assert value(s, FAILURES, reason="database_unavailable") == 0
        assert time.time() - value(s, LAST) < 5
        own_pg.halt()
        try:
            s = wait_for(lambda: (s := scrape(hub, ada)) and value(s, UP) == 0 and s)
            assert s, "computehub_database_up stayed 1 with the database down"
            r = hub.call("POST", "/workloads", carol, json={"queue": "nlp", "resources": {"gpu": 1}})
            assert r.status_code == 503 and r.json()["error"] == "database_unavailable"
            stopped = value(s, LAST)
            time.sleep(1.5)                                   # three cycle intervals: none succeeds
            s = scrape(hub, ada)
            assert value(s, UP) == 0 and value(s, LAST) == stopped
            assert value(s, UNAVAILABLE, error="database_unavailable") >= 1
            # Each cycle meanwhile failed on the database (not counted as a bug).
            assert value(s, FAILURES, reason="database_unavailable") >= 2
            assert value(s, FAILURES, reason="error") == 0
            assert value(s, "computehub_gpus_capacity", flavor="a100") == 8     # memory is still shown
        finally:
            own_pg.resume()
        s = wait_for(lambda: (s := scrape(hub, ada)) and value(s, UP) == 1 and value(s, LAST) > stopped and s)
        assert s, "the database answers again, but the metrics do not say so"


def test_an_unreachable_hub_is_counted(tmp_path):
    port, nobody = free_port(), free_port()
    (tmp_path / "config.py").write_text("c.ComputeHubService.authenticate_metrics = False\n")
    env = dict(os.environ, JUPYTERHUB_API_URL=f"http://127.0.0.1:{nobody}/hub/api", JUPYTERHUB_API_TOKEN="t" * 32,
               JUPYTERHUB_SERVICE_PREFIX="/services/computehub/", JUPYTERHUB_SERVICE_NAME="computehub")
    log = open(tmp_path / "service.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "hub_ext", "serve", f"--data-dir={tmp_path}",
                             f"--config={tmp_path / 'config.py'}", f"--url=http://127.0.0.1:{port}"], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}/services/computehub"
    try:
        def metrics():
            try:
                r = requests.get(base + "/metrics", timeout=5)
            except requests.ConnectionError:
                assert proc.poll() is None, (tmp_path / "service.log").read_text()
                return None
            return r
        r = wait_for(metrics, timeout=30)
        assert r is not None and r.status_code == 200, r and r.text
        assert f'{UNAVAILABLE}{{error="hub_unavailable"}} 0.0' in r.text
        for _ in range(2):
            r = requests.get(base + "/api/v1/me", headers={"Authorization": "token abc"}, timeout=5)
            assert r.status_code == 503 and r.json()["error"] == "hub_unavailable"
        assert f'{UNAVAILABLE}{{error="hub_unavailable"}} 2.0' in metrics().text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


@pytest.mark.postgres
def test_metrics_are_served_while_memory_waits_for_the_database(tmp_path, own_pg):
    """A transaction fails as it commits and memory cannot be read back (the server stopped):
    every API call answers 503 until it can, but /metrics answers, saying the database is down
    and showing nothing from memory; once the server is back, memory is read back on a scrape."""
    svc = ComputeHubService(data_dir=str(tmp_path), db_url=own_pg.create_database(),
                            service_prefix="/services/computehub/", authenticate_metrics=False,
                            nodes=[{"name": "n0", "gpus": 8}], initial_queues=[{"name": "a"}])
    svc.initialize([])
    armed, halted = [True], []

    @event.listens_for(svc.sched.store.engine, "commit")
    def stop_server(conn):
        if armed and armed.pop():
            own_pg.halt()
            halted.append(True)

    with pytest.raises(StoreUnavailable):
        svc.sched.put_node({"name": "n1", "gpus": 2})
    assert svc.sched.stale
    port = free_port()

    async def get(path):
        from tornado.httpclient import AsyncHTTPClient
        r = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/services/computehub/{path}",
                                          raise_error=False)
        return r.code, r.body.decode()

    async def run():
        from tornado.httpserver import HTTPServer
        server = HTTPServer(svc.make_app())
        server.listen(port, "127.0.0.1")
        try:
            other = await get("api/v1/queues")
            down = [await get("metrics"), other]
            own_pg.resume()
            halted.clear()
            return down, await get("metrics")
        finally:
            server.stop()

    try:
        (metrics, other), back = asyncio.run(run())
    finally:
        if halted:
            own_pg.resume()
        svc.sched.store.close()
    assert other[0] == 503 and "database_unavailable" in other[1]
    assert metrics[0] == 200, metrics
    assert f"{UP} 0.0" in metrics[1] and "computehub_workloads" not in metrics[1]
    assert f'{UNAVAILABLE}{{error="database_unavailable"}} 1.0' in metrics[1]
    assert back[0] == 200 and f"{UP} 1.0" in back[1] and 'computehub_gpus_capacity{flavor="all"} 8.0' in back[1]
    assert not svc.sched.stale


def test_failed_scheduling_cycles_are_counted_by_reason(tmp_path, monkeypatch):
    """The service's own scheduling loop, in-process on a real SQLite file, scraped through its
    real HTTP app. Injected in-process: a bug in the engine (its cycle raises), then the
    ``LostExclusivity`` a write raises once another service took the database (made for real
    in test_one_service.py, where the service then exits before anyone could scrape it). The
    database going away is counted in the PostgreSQL test above."""
    svc = ComputeHubService(data_dir=str(tmp_path), service_prefix="/services/computehub/",
                            authenticate_metrics=False, nodes=[{"name": "n0", "gpus": 8}],
                            initial_queues=[{"name": "a"}], cycle_interval=0.05, cycle_delay=0.0,
                            cycle_min_interval=0.0)
    svc.initialize([])
    faults: list[BaseException] = []
    real_cycle = Engine.cycle

    def engine_cycle(self, now):
        if faults:
            raise faults[0]
        return real_cycle(self, now)

    monkeypatch.setattr(Engine, "cycle", engine_cycle)
    port = free_port()

    async def failures():
        from tornado.httpclient import AsyncHTTPClient
        r = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/services/computehub/metrics")
        return {dict(s.labels)["reason"]: s.value for f in text_string_to_metric_families(r.body.decode())
                for s in f.samples if s.name == FAILURES}

    async def until(what, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not what() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def run():
        from tornado.httpserver import HTTPServer
        server = HTTPServer(svc.make_app())
        server.listen(port, "127.0.0.1")
        svc._changed, svc._wake, svc._stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = asyncio.create_task(svc.scheduling_loop())
        try:
            await until(lambda: svc.metrics.health.last_cycle is not None)
            seen = [await failures()]
            cycles = svc.cycles
            faults.append(RuntimeError("injected bug"))
            await asyncio.sleep(0.3)                          # several cycles, each failing
            seen.append(await failures())
            assert svc.cycles == cycles, "the injected bug did not fail the cycles"
            # Cycles go on failing while the scrape above is answered: the count at the switch is
            # read in-process, with no await between (nothing else runs on the loop meanwhile).
            errors = svc.metrics.registry.get_sample_value(FAILURES, {"reason": "error"})
            faults[:] = [LostExclusivity({"host": "elsewhere", "pid": 1})]
            await asyncio.wait_for(loop, 5)                   # it stops scheduling
            seen.append(await failures())
            return seen + [errors]
        finally:
            svc.stopping = True
            svc._wake.set()
            await asyncio.wait_for(loop, 5)
            server.stop()

    try:
        before, buggy, lost, errors_at_switch = asyncio.run(run())
    finally:
        svc.sched.store.close()
    # Every reason is there from the start, at 0, so rate() works before the first failure.
    assert before == {"database_unavailable": 0, "lost_exclusivity": 0, "error": 0}, before
    assert buggy["error"] >= 2 and buggy["database_unavailable"] == 0 and buggy["lost_exclusivity"] == 0, buggy
    assert lost["lost_exclusivity"] == 1 and lost["error"] == errors_at_switch >= buggy["error"], (lost, buggy)
    assert svc.exit_status == 1
