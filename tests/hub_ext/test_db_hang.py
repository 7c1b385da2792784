"""The service's PostgreSQL server freezing with its connections left open (a paused VM, a
wedged server): ``PgServer.pause`` stops every server process with SIGSTOP. Real JupyterHub,
proxy, service and PostgreSQL (realhub.py); nothing is emulated.

Before ``database_timeout`` the service's one event loop waited in the driver for as long
as the connection lasted: every request through the proxy, ``/metrics`` and the cycles
stopped with it, and each call here ran into its client timeout. What must hold now:

- the service keeps answering: reads of live work from memory, 503 for what needs the
  database (nothing accepted), ``computehub_database_up`` 0 on ``/metrics``;
- it recovers by itself once the server answers, same process, and every 201 is stored.
"""

from __future__ import annotations

import time

import pytest
from realhub import RealHub
from test_db_outage import Calls, check_consistent, recovered, wait_for
from test_metrics_waiting import scrape, value

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CONFIG = ("\nc.ComputeHubService.database_timeout = 2\n"
          "c.ComputeHubService.cycle_interval = 1\n")


def settled(calls, token) -> bool:
    def states():
        return {i: calls.call("GET", f"/workloads/{i}", token).json()["state"] for i in calls.accepted}
    before = states()
    time.sleep(1.5)
    return states() == before


def test_a_frozen_database_does_not_stop_the_service(tmp_path, own_pg):
    url = own_pg.create_database()
    with RealHub(tmp_path, db_url=url, extra_service_config=CONFIG) as hub:
        pid = hub.service_pid()
        alice, carol, ada = hub.tokens["alice"], hub.tokens["carol"], hub.tokens["ada"]
        calls = Calls(hub)
        first = calls.submit(alice, "first", "vision", 2).json()["id"]
        assert wait_for(lambda: calls.call("GET", f"/workloads/{first}", alice).json()["state"] == "admitted")
        own_pg.pause()
        try:
            t0, n = time.monotonic(), 0
            while time.monotonic() - t0 < 8:
                n += 1
                # Each answered within the client's 10 s (before: no answer at all).
                assert calls.submit(carol, f"during-{n}", "nlp").status_code == 503
                r = calls.call("GET", f"/workloads/{first}", alice)
                assert r.status_code == 200 and r.json()["state"] == "admitted"
                time.sleep(0.2)
            assert len(calls.refused) == n
            s = scrape(hub, ada)
            assert value(s, "computehub_database_up") == 0
            assert value(s, "computehub_unavailable_responses_total", error="database_unavailable") >= n
        finally:
            own_pg.unpause()
        assert recovered(calls, carol, "nlp")
        assert wait_for(lambda: value(scrape(hub, ada), "computehub_database_up") == 1)
        assert calls.call("DELETE", f"/workloads/{first}", alice).status_code == 200
        # Its GPUs go to waiting work at the next cycle: compare the database with the API once
        # the states have stopped changing (two looks a cycle apart agree).
        assert wait_for(lambda: settled(calls, ada))
        stored = check_consistent(hub, calls, url)
        assert stored[first].state == "cancelled"
        assert hub.service_pid() == pid
        assert 500 not in calls.statuses
        assert "did not answer within 2 s" in hub.tail(200_000)
