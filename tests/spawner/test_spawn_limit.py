"""Users waiting in ComputeHub's queue do not count against the hub's spawn limit (issue 4).

A real hub + proxy + service + queued local spawner (real servers); the one GPU
is emulated (a declared simulated node). The admin asked for
``concurrent_spawn_limit=1``: JupyterHub would answer 429 to a second user whose
spawn is pending, and every queued spawn is pending. configure_jupyterhub turns
the hub's limit off and applies it to servers starting after admission.
"""

from __future__ import annotations

import pytest

from localhub import RealHub, hub_api, kill_servers, spawner_config, wait_for, wait_ready
from test_notebook_watch import IDLE_SERVICE, workloads


@pytest.mark.slow
def test_queued_users_are_not_turned_away_by_the_spawn_limit(tmp_path):
    hub = RealHub(tmp_path, extra_service_config=IDLE_SERVICE, configure_kwargs="concurrent_spawn_limit=1")
    hub.spawner_config = spawner_config(hub)
    try:
        hub.start()
        assert hub_api(hub, "POST", "/users/alice/server", "alice").status_code in (201, 202)
        wait_ready(hub, "alice")
        for user in ("bob", "lin"):       # two spawns pending at once, over the limit of 1
            r = hub_api(hub, "POST", f"/users/{user}/server", user)
            assert r.status_code == 202, f"{user}: {r.status_code} {r.text}"
        wait_for("both queued", lambda: len(workloads(hub, "bob", "pending")) == 1
                 and len(workloads(hub, "lin", "pending")) == 1, 30)
        positions = sorted(hub.call("GET", f"/workloads/{w['id']}", hub.tokens["ada"]).json()["position_in_queue"]
                           for u in ("bob", "lin") for w in workloads(hub, u, "pending"))
        assert positions == [1, 2]
    finally:
        hub.stop()
        kill_servers(hub)
