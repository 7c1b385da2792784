"""The usage page (``<service>/usage``) and its CSV in a real browser, against a real hub, proxy
and service: an admin sees everyone's GPU-hours, a user only her own, each row the ledger's
figure as ``GET api/v1/usage`` gives it; a window or grouping the page does not offer is a 400
page that says what is. Nothing is emulated (the GPUs are the hub's declared nodes)."""

from __future__ import annotations

import csv
import io
import time

import pytest
from playwright import sync_api
from test_admin_pages import signed_in
from test_authz import call, wait_state

pytestmark = pytest.mark.slow


def _held(hub, user: str, seconds: float) -> str:
    """A 1-GPU workload of ``user`` that holds its GPU ``seconds`` and is then cancelled."""
    r = call(hub, user, "POST", "/api/v1/workloads", {"queue": "vision", "resources": {"gpu": 1},
                                                      "name": f"{user}-usage"})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    wait_state(hub, wid)
    time.sleep(seconds)
    assert call(hub, user, "DELETE", f"/api/v1/workloads/{wid}").status_code == 200
    return wid


def _api_rows(hub, user: str, by: str) -> dict:
    rows = call(hub, user, "GET", f"/api/v1/usage?by={by}&start={time.time() - 86400}").json()["rows"]
    return {r[by]: r for r in rows}


def test_usage_page_and_csv_show_what_each_may_see(hub, browser):
    alices, bobs = _held(hub, "alice", 1.2), _held(hub, "bob", 0.6)
    api = _api_rows(hub, "ada", "workload")
    ctx, page = signed_in(browser, hub, hub.service_url + "/usage?days=1&by=workload", "ada")
    try:
        assert page.locator("h1").inner_text() == "GPU usage and cost"
        assert "everyone's" in page.locator("p.lead").inner_text()
        sync_api.expect(page.locator("nav a[aria-current=page]")).to_have_text("Usage")
        for wid, user in ((alices, "alice"), (bobs, "bob")):
            row = page.locator(f"tr[data-key='{wid}']")
            assert float(row.get_attribute("data-gpu-seconds")) == pytest.approx(api[wid]["gpu_seconds"], abs=1e-3)
            assert api[wid]["user"] == user and row.locator("td").nth(0).inner_text() == user
            assert row.locator("td").nth(2).inner_text() == "< 0.01"      # a second or so of one GPU
        assert api[alices]["gpu_seconds"] > api[bobs]["gpu_seconds"] > 0.5
        total = float(page.locator("tfoot tr").get_attribute("data-gpu-seconds"))
        assert total >= api[alices]["gpu_seconds"] + api[bobs]["gpu_seconds"] - 1e-3
        # The form: another grouping, the same numbers summed by user.
        page.select_option("select[name=by]", "user")
        page.click("form.usage-form button[type=submit]")
        page.wait_for_url("**/usage?days=1&by=user")
        sync_api.expect(page.locator("table caption")).to_contain_text("By user")
        by_user = _api_rows(hub, "ada", "user")
        for user in ("alice", "bob"):
            got = float(page.locator(f"tr[data-key='{user}']").get_attribute("data-gpu-seconds"))
            assert got == pytest.approx(by_user[user]["gpu_seconds"], abs=1e-3)
        # The CSV is the same table.
        r = page.request.get(hub.service_url + "/usage.csv?days=1&by=workload")
        assert r.status == 200 and r.headers["content-type"].startswith("text/csv")
        assert 'filename="computehub-usage-1d-by-workload.csv"' in r.headers["content-disposition"]
        table = {row["workload"]: row for row in csv.DictReader(io.StringIO(r.text()))}
        assert float(table[alices]["gpu_hours"]) == pytest.approx(api[alices]["gpu_hours"], abs=1e-6)
        assert (table[alices]["user"], table[alices]["queue"]) == ("alice", "vision")
        # By job array: a 2-task array's GPU-seconds as one row, with whose it is.
        r = call(hub, "alice", "POST", "/api/v1/workloads", {"queue": "vision", "resources": {"gpu": 1},
                                                             "name": "alice-sweep", "array": "0-1"})
        assert r.status_code == 201, r.text
        tasks = r.json()["tasks"]
        for t in tasks:
            wait_state(hub, t)
        time.sleep(0.5)
        for t in tasks:
            assert call(hub, "alice", "DELETE", f"/api/v1/workloads/{t}").status_code == 200
        by_array = _api_rows(hub, "ada", "array")
        assert by_array[tasks[0]]["user"] == "alice" and not set(tasks[1:]) & set(by_array)
        by_w = _api_rows(hub, "ada", "workload")
        assert by_array[tasks[0]]["gpu_seconds"] == pytest.approx(sum(by_w[t]["gpu_seconds"] for t in tasks), abs=1e-3)
        page.goto(hub.service_url + "/usage?days=1&by=array")
        row = page.locator(f"tr[data-key='{tasks[0]}']")
        assert row.locator("td").nth(0).inner_text() == "alice" and row.locator("td").nth(1).inner_text() == "vision"
        sync_api.expect(page.locator("table caption")).to_contain_text("By job array")
        # A window the page does not offer: a 400 page that says which it does.
        resp = page.goto(hub.service_url + "/usage?days=3")
        assert resp.status == 400 and "days must be one of 1, 7, 30, 90, not '3'" in page.locator("main").inner_text()
    finally:
        ctx.close()

    ctx, page = signed_in(browser, hub, hub.service_url + "/", "alice")
    try:
        page.click("a[href$='/usage']")
        page.wait_for_url("**/usage")
        assert "your own" in page.locator("p.lead").inner_text()
        page.goto(hub.service_url + "/usage?days=1&by=workload")
        assert page.locator(f"tr[data-key='{alices}']").count() == 1
        assert page.locator(f"tr[data-key='{bobs}']").count() == 0        # bob's is not hers to see
        assert page.locator("nav").count() == 0                           # no admin pages for her
        r = page.request.get(hub.service_url + "/usage.csv?days=1&by=user")
        assert {row["user"] for row in csv.DictReader(io.StringIO(r.text()))} == {"alice"}
    finally:
        ctx.close()


@pytest.mark.parametrize("name,cell", [("alice", "alice"), ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"),
                                       ("+1", "'+1"), ("-1", "'-1"), ("@sum", "'@sum"), ("a=b", "a=b")])
def test_csv_cells_that_look_like_formulas_are_not_formulas(name, cell):
    from hub_ext.usage import cell as as_cell
    assert as_cell(name) == cell
