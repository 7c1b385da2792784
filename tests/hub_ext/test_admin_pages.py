"""The admin pages in a real browser, against a real hub, proxy and service.

Chromium (the Debian package, driven by Playwright) logs in through the hub's
login form and OAuth, edits a queue's guarantee and drains a node from the
pages, and the REST API confirms both. A second browser context is a user
without the admin scope: she gets the 403 page and her own landing page.
Nothing is emulated; the hub has no GPU nodes beyond the two declared ones.
A screenshot of the admin page is kept in ``test-artifacts/admin-page.png``.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from hub_login import fill_hub_login
from playwright import sync_api


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
NEED_ADMIN = "ComputeHub admin pages need the custom:computehub:admin scope"

pytestmark = pytest.mark.slow


@pytest.fixture
def admin_hub(fresh_hub):
    """A hub of our own: the test changes quotas and drains nodes."""
    return fresh_hub.start()


def login(page, hub, url: str, user: str) -> None:
    """Visit ``url``: the service sends us to the hub's login form, then through OAuth back."""
    page.goto(url)
    fill_hub_login(page, user)
    page.wait_for_load_state()
    if "/oauth2/authorize" in page.url:    # the hub asks once whether the service may know who we are
        page.click("button[type=submit]:has-text('Authorize')")
    page.wait_for_url(url)


def signed_in(browser, hub, url: str, user: str):
    """A new browser context and page, signed in as ``user`` at ``url``."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        login(page, hub, url, user)
    except BaseException:
        ctx.close()
        raise
    return ctx, page


def test_admin_edits_quota_and_drains_node(admin_hub, browser, tmp_path):
    hub = admin_hub
    ada = hub.tokens["ada"]
    assert hub.call("GET", "/queues/vision", ada).json()["guaranteed"]["gpu"] == 4
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        login(page, hub, hub.service_url + "/admin/", "ada")
        assert page.locator("h1").inner_text() == "Queues and quotas"
        assert "Signed in as ada" in page.locator("header.top").inner_text()
        vision = page.locator("form.quota-form[data-queue=vision]")

        # An API error (limit below the guarantee) is shown on the page, and nothing changes.
        vision.locator("input[name=limit_gpu]").fill("1")
        vision.locator("button[type=submit]").click()
        status = vision.locator("output.form-status")
        sync_api.expect(status).to_contain_text("is below its guarantee")
        sync_api.expect(page.locator("#flash")).to_contain_text("400 invalid")
        assert hub.call("GET", "/queues/vision", ada).json()["limit"] == {}

        # Lower vision's guarantee 4 -> 3: the page reloads with it, and the API has it.
        vision.locator("input[name=limit_gpu]").fill("")
        vision.locator("input[name=guaranteed_gpu]").fill("3")
        vision.locator("button[type=submit]").click()
        sync_api.expect(page.locator("#flash")).to_contain_text("Saved the quotas of queue vision")
        shot = tmp_path / "admin-page.png"
        page.screenshot(path=str(shot), full_page=True)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copyfile(shot, ARTIFACTS / "admin-page.png")
        page.reload()
        sync_api.expect(vision.locator("input[name=guaranteed_gpu]")).to_have_value("3")
        sync_api.expect(page.locator("#queue-vision .usage-text").first).to_contain_text("3 guaranteed")
        q = hub.call("GET", "/queues/vision", ada).json()
        assert q["guaranteed"]["gpu"] == 3
        assert q["user_limit"] == {"gpu": 8} and q["groups"] == ["vision"]    # the rest is kept

        # 0 is a limit (nothing), not "no limit": a per-user cap of 0 is saved as such.
        for cap in ("0", "8"):
            vision.locator("input[name=user_limit_gpu]").fill(cap)
            vision.locator("button[type=submit]").click()
            sync_api.expect(page.locator("#flash")).to_contain_text("Saved the quotas of queue vision")
            assert hub.call("GET", "/queues/vision", ada).json()["user_limit"] == {"gpu": int(cap)}
            page.reload()
            sync_api.expect(vision.locator("input[name=user_limit_gpu]")).to_have_value(cap)

        # Pending work with its start estimate: alice's second 8-GPU gang waits for the first
        # (2 h limit); it would start on GPUs beyond vision's guarantee of 3, so the estimate
        # is a lower bound and the page says "or later".
        alice = hub.tokens["alice"]
        gang = {"queue": "vision", "kind": "batch", "resources": {"gpu": 4}, "workers": 2, "time_limit": 7200}
        first, second = (hub.call("POST", "/workloads", alice, json=gang).json()["id"] for _ in range(2))
        third = fourth = None
        tasks = []
        try:
            page.click("nav >> text=Pending")
            page.wait_for_url(hub.service_url + "/admin/pending")
            row = page.locator(f"#w-{second}")
            sync_api.expect(row).to_contain_text(re.compile(r"in (2 h 0 min|1 h 59 min) or later"))
            sync_api.expect(row).to_contain_text("at the earliest: it would start on GPUs beyond queue vision's")
            # Held work is listed apart, with what keeps it back.
            third = hub.call("POST", "/workloads", alice, json={**gang, "after": [second]}).json()["id"]
            tasks = hub.call("POST", "/workloads", alice, json={**gang, "hold": True, "array": "6-7"}).json()["tasks"]
            fourth = tasks[0]
            page.reload()
            held = page.locator("#held-work")
            sync_api.expect(held.locator(f"#w-{third} .reason")).to_have_text(
                f"runs after {second} finishes (it is pending)")
            # ... and when it would start: once the second gang (from ~2 h, for 2 h) has finished.
            sync_api.expect(held.locator(f"#w-{third}")).to_contain_text(re.compile(r"in (4 h 0 min|3 h 59 min)"))
            sync_api.expect(held.locator(f"#w-{third}")).to_contain_text("if what it runs after finishes")
            sync_api.expect(held.locator(f"#w-{fourth} .reason")).to_contain_text("held by alice: held at submission")
            sync_api.expect(page.locator(f"#pending-work #w-{third}")).to_have_count(0)
            # A job array's tasks that wait together are one line, here and among the pending.
            sync_api.expect(held.locator(f"#w-{fourth}")).to_contain_text(f"tasks 6-7 of array {fourth} (2 tasks)")
            sync_api.expect(held.locator(f"#w-{tasks[1]}")).to_have_count(0)
            sync_api.expect(page.locator("h2#held")).to_have_text("Held (3)")        # workloads, not lines
            # Work with a begin time: held until then, and that is its start estimate, at the earliest.
            fifth = hub.call("POST", "/workloads", alice, json={**gang, "begin": time.time() + 3 * 3600}).json()["id"]
            tasks.append(fifth)
            page.reload()
            sync_api.expect(held.locator(f"#w-{fifth}")).to_contain_text(
                re.compile(r"in (3 h 0 min|2 h 59 min) or later"))
            sync_api.expect(held.locator(f"#w-{fifth} .reason")).to_contain_text("by alice: its begin time")
            sweep = hub.call("POST", "/workloads", alice,
                             json={**gang, "array": "0-2", "name": "sweep"}).json()["tasks"]
            tasks += sweep
            page.reload()
            line = page.locator(f"#pending-work #w-{sweep[0]}")
            sync_api.expect(line).to_contain_text(f"tasks 0-2 of array {sweep[0]} (3 tasks)")
            sync_api.expect(line.locator(".reason")).not_to_be_empty()
            sync_api.expect(page.locator(f"#pending-work #w-{sweep[1]}")).to_have_count(0)
            sync_api.expect(page.locator(".lead")).to_contain_text("(4 workloads in 2 lines)")
        finally:
            for wid in filter(None, (first, second, third, *tasks)):
                hub.call("DELETE", f"/workloads/{wid}", alice)

        # Drain gpu-b from the nodes page.
        page.click("nav >> text=Nodes")
        page.wait_for_url(hub.service_url + "/admin/nodes")
        page.click("button:has-text('Drain gpu-b')")
        sync_api.expect(page.locator("#flash")).to_contain_text("gpu-b is draining")
        sync_api.expect(page.locator("#node-gpu-b .drain-state")).to_have_text("draining")
        sync_api.expect(page.locator("#node-gpu-a .drain-state")).to_have_text("schedulable")
        assert hub.call("GET", "/nodes/gpu-b", ada).json()["draining"] is True
        assert hub.call("GET", "/nodes/gpu-a", ada).json()["draining"] is False

        # A node the Kubernetes inventory drains for a cordon: only an uncordon lifts it.
        kube = {"gpus": 8, "gpu_model": "a100", "cpu": 64, "memory": "512Gi", "draining": True,
                "labels": {"computehub/source": "kubernetes", "computehub/cordoned": "true"}}
        assert hub.call("PUT", "/nodes/kube-1", ada, json=kube).status_code == 201
        page.reload()
        row = page.locator("#node-kube-1")
        sync_api.expect(row.locator(".badge.kube")).to_have_text("Kubernetes")
        sync_api.expect(row.locator(".drain-state")).to_have_text("draining (cordoned in Kubernetes)")
        sync_api.expect(row).to_contain_text("kubectl uncordon kube-1")
        assert row.locator("button:has-text('Undrain')").count() == 0
        assert page.locator("#node-gpu-a .badge.kube").count() == 0
        r = hub.call("PATCH", "/nodes/kube-1", ada, json={"draining": False})
        assert r.status_code == 409 and "kubectl uncordon kube-1" in r.json()["message"], r.text
        assert hub.call("GET", "/nodes/kube-1", ada).json()["draining"] is True
        assert hub.call("DELETE", "/nodes/kube-1", ada).status_code == 200

        # A job array's requests are one, approved together in one request.
        carol = hub.tokens["carol"]
        many = hub.call("POST", "/workloads", carol, json={"queue": "nlp", "resources": {"gpu": 4}, "workers": 2,
                                                           "array": "0-2", "hold": True}).json()["tasks"]
        try:
            page.click("nav >> text=Approvals")
            row = page.locator(f"#approval-{many[0]}")
            sync_api.expect(row).to_contain_text(f"tasks 0-2 of array {many[0]} (3 tasks)")
            sync_api.expect(page.locator(f"#approval-{many[1]}")).to_have_count(0)
            row.locator("button:has-text('Approve all 3')").click()
            sync_api.expect(page.locator("#flash")).to_contain_text(f"Approved 3 tasks of array {many[0]}")
            assert [hub.call("GET", f"/workloads/{t}", carol).json()["state"] for t in many] == ["held"] * 3
        finally:
            for t in many:
                hub.call("DELETE", f"/workloads/{t}", carol)

        # Reject a request that waits for approval, with a reason.
        big = hub.call("POST", "/workloads", carol, json={"queue": "nlp", "resources": {"gpu": 4}, "workers": 2})
        assert big.json()["state"] == "awaiting_approval", big.text
        wid = big.json()["id"]
        page.click("nav >> text=Approvals")
        row = page.locator(f"#approval-{wid}")
        sync_api.expect(row).to_contain_text("needs an admin's approval above 6")
        row.locator("input[name=reason]").fill("use two GPUs")
        row.locator("button:has-text('Reject')").click()
        sync_api.expect(page.locator("#flash")).to_contain_text(f"Rejected {wid}")
        sync_api.expect(page.locator("main")).to_contain_text("No request is waiting")
        w = hub.call("GET", f"/workloads/{wid}", carol).json()
        assert (w["state"], w["reason"]) == ("rejected", "use two GPUs")

        # The audit log page shows both changes with who made them.
        page.click("nav >> text=Audit log")
        rows = page.locator("table.audit tbody tr")
        sync_api.expect(rows.filter(has_text="queue vision: guaranteed.gpu: 4 → 3")).to_contain_text("ada")
        sync_api.expect(rows.filter(has_text="node gpu-b: draining: false → true")).to_contain_text("ada")
    finally:
        ctx.close()


def test_non_admin_gets_403_and_own_landing_page(hub, browser):
    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        login(page, hub, hub.service_url + "/admin/", "alice")
        assert page.locator("h1").inner_text() == "403 Forbidden"
        assert NEED_ADMIN in page.locator("main").inner_text()
        assert page.locator("table").count() == 0 and page.locator("form.quota-form").count() == 0
        resp = page.goto(hub.service_url + "/admin/nodes")
        assert resp.status == 403 and "gpu-a" not in page.content()

        r = hub.call("POST", "/workloads", hub.tokens["alice"], json={"queue": "vision", "resources": {"gpu": 1},
                                                                      "name": "landing-ended", "array": "3"})
        assert r.status_code == 201, r.text
        wid = r.json()["id"]          # a job array of one task, index 3
        assert hub.call("DELETE", f"/workloads/{wid}", hub.tokens["alice"]).status_code == 200
        page.goto(hub.service_url + "/")
        assert page.locator(".me-name").inner_text() == "alice"
        # Her latest ended work, latest first, with why it ended.
        row = page.locator("table.ended tbody tr").first
        assert row.get_attribute("data-workload-id") == wid
        assert "landing-ended" in row.inner_text() and "cancelled by alice" in row.locator(".reason").inner_text()
        assert f"[3] of array {wid}" in row.inner_text()
        assert page.locator("a[href$='/admin/']").count() == 0
        assert page.locator("a[href$='api/v1/openapi.json']").count() >= 1
    finally:
        ctx.close()
