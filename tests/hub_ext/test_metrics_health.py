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
from realhub import RealHub, free_port
from sqlalchemy import event
from test_metrics_waiting import scrape, value, wait_for

from hub_ext.app import ComputeHubService
from scheduler.errors import StoreUnavailable

UP, LAST = "computehub_database_up", "computehub_scheduling_cycle_last_success_timestamp_seconds"
UNAVAILABLE = "computehub_unavailable_responses_total"


@pytest.mark.slow
@pytest.mark.postgres
def test_the_database_going_away_and_coming_back_is_seen_on_metrics(tmp_path, own_pg):
    with RealHub(tmp_path, db_url=own_pg.create_database()) as hub:
        ada, carol = hub.tokens["ada"], hub.tokens["carol"]
        s = wait_for(lambda: (s := scrape(hub, ada)) and value(s, LAST) and s)
        assert value(s, UP) == 1 and value(s, UNAVAILABLE, error="database_unavailable") == 0
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
