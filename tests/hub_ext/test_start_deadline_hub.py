"""The service's ``start_deadline`` on the real hub, proxy and service (realhub.py): a bare
submission (no ``metadata.job``: no launcher runs it) holds its GPU only until the deadline,
goes back in line once, then fails saying why; work reported running is left alone. The
deadline is 2 s here instead of an hour."""

from __future__ import annotations

import time

import pytest
from realhub import RealHub

CONFIG = "\nc.ComputeHubService.start_deadline = 2\nc.ComputeHubService.cycle_interval = 0.5\n"


def wait_for(what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        out = what()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


@pytest.mark.slow
def test_admitted_work_nothing_starts_gives_its_gpu_back(tmp_path):
    with RealHub(tmp_path, extra_service_config=CONFIG) as hub:
        alice, launcher = hub.tokens["alice"], hub.launcher_token
        body = {"queue": "vision", "resources": {"gpu": 1}, "kind": "training"}
        bare = hub.call("POST", "/workloads", alice, json={**body, "name": "bare"}).json()["id"]
        run = hub.call("POST", "/workloads", alice, json={**body, "name": "run"}).json()["id"]
        get = lambda wid: hub.call("GET", f"/workloads/{wid}", alice).json()     # noqa: E731
        assert wait_for(lambda: get(run)["state"] == "admitted" and get(bare)["state"] == "admitted")
        assert hub.call("POST", f"/workloads/{run}/status", launcher, json={"state": "running"}).status_code == 200
        ended = wait_for(lambda: (w := get(bare))["state"] == "failed" and w)
        assert ended, get(bare)
        assert "nothing reported it running" in ended["reason"] and "the second time" in ended["reason"]
        audit = hub.call("GET", f"/audit?workload={bare}", hub.tokens["ada"]).json()
        kinds = [e["kind"] for e in audit["events"]]
        assert kinds.count("start_timeout") == 2 and "requeued" in kinds, kinds
        assert get(run)["state"] == "running"
        log = hub.tail(200_000)
        assert f"{bare} (alice, training): not reported running within 2 s of its admission: requeued" in log
        assert f"{bare} (alice, training): not reported running within 2 s of its admission: failed" in log
