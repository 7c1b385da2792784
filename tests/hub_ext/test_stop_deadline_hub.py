"""The service's ``stop_deadline`` on the real hub, proxy and service (realhub.py): a victim
that no launcher reports stopped stops holding up the work that preempted it. Its GPUs stay
held (nothing is placed on them), the waiting work reclaims elsewhere, an event, the log and
/metrics say so, and the admin nodes page (Chromium) reports its stop, which frees them. The
test plays the launcher (the hub service with submit-on-behalf); the deadline is 2 s here
instead of 15 min."""

from __future__ import annotations

import pytest
from playwright import sync_api
from realhub import RealHub
from test_admin_pages import login
from test_cli_client import cli, ok
from test_metrics_waiting import scrape, value, wait_for

CONFIG = "\nc.ComputeHubService.stop_deadline = 2\nc.ComputeHubService.cycle_interval = 0.5\n"


@pytest.mark.slow
def test_a_victim_never_reported_stopped_holds_its_gpus_but_not_the_work_that_waits(tmp_path, browser):
    with RealHub(tmp_path, extra_service_config=CONFIG) as hub:
        alice, carol, ada = (hub.tokens[u] for u in ("alice", "carol", "ada"))
        launcher = hub.launcher_token
        # Training work may be reclaimed at once (600 s by default).
        cls = hub.call("GET", "/classes/training", ada).json()
        assert hub.call("PUT", "/classes/training", ada, json={**cls, "preempt_after": 0}).status_code == 200
        get = lambda wid: hub.call("GET", f"/workloads/{wid}", ada).json()     # noqa: E731
        report = lambda wid, st: hub.call("POST", f"/workloads/{wid}/status", launcher,  # noqa: E731
                                          json={"state": st}).status_code
        body = {"queue": "vision", "resources": {"gpu": 4}, "kind": "training"}
        v1 = hub.call("POST", "/workloads", alice, json={**body, "name": "v1"}).json()["id"]
        assert wait_for(lambda: get(v1)["state"] == "admitted")
        v2 = hub.call("POST", "/workloads", alice, json={**body, "name": "v2"}).json()["id"]
        assert wait_for(lambda: get(v2)["state"] == "admitted")       # vision borrows nlp's 4
        assert report(v1, "running") == report(v2, "running") == 200
        n1 = hub.call("POST", "/workloads", carol, json={**body, "queue": "nlp"}).json()["id"]
        # nlp is owed its 4: the youngest borrower is told to stop, and never reports it has.
        assert wait_for(lambda: get(v2)["state"] == "preempting")
        stuck = {a["node"] for a in get(v2)["placement"]}
        stuck_node, = stuck
        overdue = wait_for(lambda: [e for e in hub.call("GET", f"/audit?workload={v2}", ada).json()["events"]
                                    if e["kind"] == "stop_overdue"])
        assert overdue and "no launcher has reported it stopped" in overdue[0]["reason"], overdue
        assert f"preempted by {n1}" in overdue[0]["reason"]
        row = next(r for r in ok(cli(hub, "ada", "nodes")).splitlines() if r.startswith(stuck_node))
        assert f"{v2} (alice, not stopped)" in row, row
        samples = scrape(hub, ada)
        assert value(samples, "computehub_stop_overdue_gpus", queue="vision") == 4
        assert value(samples, "computehub_stop_overdue_workloads", queue="vision") == 1
        assert value(samples, "computehub_stop_overdue_workloads", queue="nlp") == 0
        # v2 still holds its GPUs, so vision still borrows: nlp reclaims them from v1 instead.
        assert wait_for(lambda: get(v1)["state"] == "preempting")
        assert report(v1, "stopped") == 200
        assert wait_for(lambda: get(n1)["state"] == "admitted")
        assert {a["node"] for a in get(n1)["placement"]}.isdisjoint(stuck)       # no GPU used twice
        assert get(v2)["state"] == "preempting"
        log = hub.tail(200_000)
        assert f"{v2} (alice, training): told to stop 2 s ago and not reported stopped" in log
        # Its owner may not report it stopped; an admin who has checked that its processes are
        # gone does, from the nodes page (a launcher that comes back does the same): its GPUs
        # are free again.
        assert hub.call("POST", f"/workloads/{v2}/status", alice, json={"state": "stopped"}).status_code == 403
        ctx = browser.new_context()
        page = ctx.new_page()
        page.set_default_timeout(20_000)
        try:
            login(page, hub, hub.service_url + "/admin/nodes", "ada")
            row = page.locator(f".holder[data-workload={v2}]")
            sync_api.expect(row.locator(".badge")).to_have_text("not stopped")
            assert "no launcher has reported it stopped" in row.locator(".badge").get_attribute("title")
            row.locator(f"button:has-text('Report {v2} stopped')").click()
            sync_api.expect(page.locator("#flash")).to_contain_text(f"{v2} is reported stopped")
            sync_api.expect(page.locator(f".holder[data-workload={v2}] .badge")).to_have_count(0)
        finally:
            ctx.close()
        assert wait_for(lambda: get(v2)["state"] in ("pending", "admitted"))
        assert wait_for(lambda: value(scrape(hub, ada), "computehub_stop_overdue_gpus", queue="vision") == 0)
