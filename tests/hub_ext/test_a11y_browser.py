"""Accessibility of the service's pages and our part of the hub's home page, in a real browser.

A real hub, proxy and service (realhub.py) and Chromium (the Debian package, driven by
Playwright); nothing is emulated. The hub is put in a realistic state first: alice's
gang fills both GPU nodes and two more of her jobs wait with a reason, carol's big
requests await approval (one was rejected), a node drains, a Kubernetes node is
cordoned, a simulated node is declared. Then axe-core (WCAG 2.1 A/AA) checks every page
ada (admin) and alice see, including the states the script produces (a flash after a
save, an API error under a form). The keyboard tests decide approvals with the keyboard
only (Tab, typing, Enter) and check that the focused control shows its focus.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from playwright import sync_api

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from a11y import assert_accessible, focus_outline, focus_visible  # noqa: E402
from realhub import RealHub  # noqa: E402
from test_admin_pages import login  # noqa: E402

pytestmark = pytest.mark.slow

ADMIN_PAGES = ["admin/", "admin/nodes", "admin/pending", "admin/approvals", "admin/audit", "usage?days=1&by=workload"]


def _ok(r):
    assert r.status_code in (200, 201), r.text
    return r.json()


@pytest.fixture(scope="module")
def busy_hub(tmp_path_factory):
    """One hub for this module, with rows on every admin page."""
    with RealHub(tmp_path_factory.mktemp("a11y-hub")) as h:
        ada, alice, carol = h.tokens["ada"], h.tokens["alice"], h.tokens["carol"]
        _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 4}, "workers": 2,
                                                       "name": "alice-gang", "time_limit": 3600}))
        for name in ("alice-next", "alice-later"):
            _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 1}, "name": name}))
        done = _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 1},
                                                            "name": "alice-done"}))
        _ok(h.call("DELETE", f"/workloads/{done['id']}", alice))      # for the landing page's ended table
        _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 1}, "hold": True,
                                                       "name": "alice-held"}))     # the pending page's held table
        big = {"queue": "nlp", "resources": {"gpu": 4}, "workers": 2}
        h.approvals = [_ok(h.call("POST", "/workloads", carol, json=dict(big, name=f"carol-{i}")))["id"]
                       for i in range(3)]
        _ok(h.call("POST", f"/approvals/{h.approvals.pop()}", ada, json={"approve": False, "reason": "too big"}))
        h.approval_array = _ok(h.call("POST", "/workloads", carol, json=dict(big, name="carol-sweep", array="0-1",
                                                                            hold=True)))["tasks"]   # one row
        _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 1}, "array": "0-2",
                                                       "name": "alice-sweep"}))     # one pending row for three
        _ok(h.call("PUT", "/nodes/sim-1", ada, json={"gpus": 2, "cpu": 8, "memory": "32Gi", "draining": True,
                                                     "labels": {"computehub/simulated": "true"}}))
        _ok(h.call("PUT", "/nodes/kube-1", ada, json={
            "gpus": 8, "gpu_model": "a100", "cpu": 64, "memory": "512Gi", "draining": True,
            "labels": {"computehub/source": "kubernetes", "computehub/cordoned": "true"}}))
        _ok(h.call("PUT", "/queues/vision", ada, json={"parent": "org", "guaranteed": {"gpu": 4}, "groups": ["vision"],
                                                       "user_limit": {"gpu": 8}, "description": "Team vision"}))
        yield h


def _page(browser, hub, url, user):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    login(page, hub, url, user)
    return ctx, page


def test_admin_pages_have_no_axe_violations(busy_hub, browser):
    hub = busy_hub
    ctx, page = _page(browser, hub, hub.service_url + "/admin/", "ada")
    try:
        for path in ADMIN_PAGES:
            page.goto(hub.service_url + "/" + path)
            sync_api.expect(page.locator("main h1")).to_be_visible()
            assert page.locator("main table, main article").count() > 0, f"{path}: no rows to check"
            assert_accessible(page, "/" + path)
            # The flash region is in the page, rendered, before it has anything to say: a live
            # region that appears together with its words is often not announced.
            flash = page.locator("#flash")
            assert flash.get_attribute("role") == "status" and flash.get_attribute("aria-live") == "polite"
            assert flash.evaluate("e => getComputedStyle(e).display") != "none", f"/{path}: #flash is not rendered"

        # The pending page's "#" column is read as what it is.
        page.goto(hub.service_url + "/admin/pending")
        sync_api.expect(page.get_by_role("columnheader", name="Position", exact=True)).to_have_count(1)

        # Which GPUs are free is said in words, not by colour alone.
        page.goto(hub.service_url + "/admin/nodes")
        for node, gpus in (("gpu-a", 4), ("sim-1", 2)):
            items = page.get_by_role("list", name=f"GPUs of {node}").get_by_role("listitem")
            sync_api.expect(items).to_have_count(gpus)
            words = [t.strip() for t in items.all_text_contents()]
            assert all(re.fullmatch(r"GPU \d+ (free|in use)", t) for t in words), words
        assert "in use" in page.locator("#node-gpu-a .gpus").text_content()
        assert "free" in page.locator("#node-sim-1 .gpus").text_content()

        # What the script adds: an API error under a quota form, then a flash after a save.
        page.goto(hub.service_url + "/admin/")
        vision = page.locator("form.quota-form[data-queue=vision]")
        vision.locator("input[name=limit_gpu]").fill("1")
        vision.locator("button[type=submit]").click()
        sync_api.expect(vision.locator("output.form-status")).to_contain_text("is below its guarantee")
        assert_accessible(page, "/admin/ with an error")
        vision.locator("input[name=limit_gpu]").fill("")
        vision.locator("button[type=submit]").click()
        sync_api.expect(page.locator("#flash")).to_contain_text("Saved the quotas of queue vision")
        assert_accessible(page, "/admin/ with a flash")
    finally:
        ctx.close()


def test_landing_error_and_hub_home_have_no_axe_violations(busy_hub, browser):
    hub = busy_hub
    ctx, page = _page(browser, hub, hub.service_url + "/", "alice")
    try:
        # the gang, two waiting, one held, and the three tasks of a job array waiting as one row
        sync_api.expect(page.locator("main table.data:not(.ended) tbody tr")).to_have_count(5)
        sync_api.expect(page.locator("main")).to_contain_text(
            re.compile(r"alice-sweep tasks 0-2 of array w\d+ \(3 tasks\)"))
        sync_api.expect(page.locator("main")).to_contain_text("held by alice: held at submission")
        sync_api.expect(page.locator("main table.ended tbody tr")).to_have_count(1)
        sync_api.expect(page.locator("main")).to_contain_text("alice-next")
        assert_accessible(page, "landing page")
        resp = page.goto(hub.service_url + "/admin/nodes")
        assert resp.status == 403
        assert_accessible(page, "403 page")
    finally:
        ctx.close()

    # The hub's home page with our card (ada sees the admin link too), in the hub's light and
    # dark themes (its own toggle). The card is our markup, the rest JupyterHub's: nothing of
    # either is excluded, as axe finds nothing in JupyterHub 6's home page.
    ctx, page = _page(browser, hub, hub.url + "/hub/home", "ada")
    try:
        sync_api.expect(page.locator("#computehub-admin-link")).to_be_visible()
        assert_accessible(page, "hub home page")
        page.locator("#dark-theme-toggle").click()
        sync_api.expect(page.locator("html")).to_have_attribute("data-bs-theme", "dark")
        # Bootstrap fades the colours over: check them once no transition runs.
        page.wait_for_function("document.getAnimations().every(a => a.playState !== 'running')")
        assert_accessible(page, "hub home page (dark theme)")
    finally:
        ctx.close()


def _tab_to(page, where: str, limit: int = 80) -> dict:
    """Press Tab until the focus is on ``where`` (a selector); fails if it never gets there."""
    target = page.locator(where)
    for _ in range(limit):
        page.keyboard.press("Tab")
        if target.evaluate("e => e === document.activeElement"):
            return focus_outline(page)
    raise AssertionError(f"Tab never reached {where}; last: {focus_outline(page)}")


def _refresh_approvals(page, hub):
    page.goto(hub.service_url + "/admin/approvals")
    sync_api.expect(page.locator("main h1")).to_have_text("Approvals")


def test_keyboard_only_approve_and_reject(busy_hub, browser):
    """Decide both waiting requests without a mouse: Tab to the control, Enter (or Space)."""
    hub = busy_hub
    carol = hub.tokens["carol"]
    approve_id, reject_id = hub.approvals
    ctx, page = _page(browser, hub, hub.service_url + "/admin/approvals", "ada")
    try:
        # The first Tab shows the skip link; following it lands in the page's content.
        page.keyboard.press("Tab")
        skip = page.locator("a.skip")
        assert skip.evaluate("e => e === document.activeElement")
        box = skip.bounding_box()
        assert box and box["x"] >= 0 and box["y"] >= 0, f"the skip link stays off screen when focused: {box}"
        assert focus_visible(page), focus_outline(page)

        # Reject with a reason: type it into the row's field and press Enter there.
        row = f"#approval-{reject_id}"
        _tab_to(page, f"{row} input[name=reason]")
        assert focus_visible(page), focus_outline(page)
        page.keyboard.type("one node is enough")
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#flash")).to_contain_text(f"Rejected {reject_id}")
        w = hub.call("GET", f"/workloads/{reject_id}", carol).json()
        assert (w["state"], w["reason"]) == ("rejected", "one node is enough"), w

        # Approve: Tab to the row's Approve button, and Space.
        _refresh_approvals(page, hub)
        f = _tab_to(page, f"#approval-{approve_id} button:has-text('Approve')")
        assert f["tag"] == "button" and focus_visible(page), f
        page.keyboard.press("Space")
        sync_api.expect(page.locator("#flash")).to_contain_text(f"Approved {approve_id}")
        w = hub.call("GET", f"/workloads/{approve_id}", carol).json()
        assert w["state"] not in ("awaiting_approval", "rejected"), w

        # A job array's tasks: one row, and its Approve decides them all.
        _refresh_approvals(page, hub)
        first = hub.approval_array[0]
        _tab_to(page, f"#approval-{first} button:has-text('Approve all 2')")
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#flash")).to_contain_text(f"Approved 2 tasks of array {first}")
        assert {hub.call("GET", f"/workloads/{t}", carol).json()["state"] for t in hub.approval_array} == {"held"}
        sync_api.expect(page.locator("main")).to_contain_text("No request is waiting")
    finally:
        ctx.close()


def test_keyboard_only_node_drain_and_quota(busy_hub, browser):
    """The node page's Drain button and a queue's quota form, with the keyboard only."""
    hub = busy_hub
    ada = hub.tokens["ada"]
    ctx, page = _page(browser, hub, hub.service_url + "/admin/nodes", "ada")
    try:
        f = _tab_to(page, "#node-gpu-b button:has-text('Drain gpu-b')")
        assert focus_visible(page), f
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#flash")).to_contain_text("gpu-b is draining")
        assert hub.call("GET", "/nodes/gpu-b", ada).json()["draining"] is True
        _tab_to(page, "#node-gpu-b button:has-text('Undrain gpu-b')")
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#flash")).to_contain_text("gpu-b takes new work again")
        assert hub.call("GET", "/nodes/gpu-b", ada).json()["draining"] is False

        page.goto(hub.service_url + "/admin/")
        field = "form.quota-form[data-queue=nlp] input[name=user_limit_gpu]"
        _tab_to(page, field)
        assert focus_visible(page), focus_outline(page)
        page.keyboard.type("2")
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#flash")).to_contain_text("Saved the quotas of queue nlp")
        assert hub.call("GET", "/queues/nlp", ada).json()["user_limit"] == {"gpu": 2}
        # The page after the save: the new value, and nothing reached by Tab hides its focus.
        sync_api.expect(page.locator(field)).to_have_value("2")
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement === document.body"):
                break
            assert focus_visible(page), focus_outline(page)
    finally:
        ctx.close()


def test_tab_order_reaches_every_admin_action(busy_hub, browser):
    """Every button, link and field of an admin page can be reached with Tab, in order."""
    hub = busy_hub
    ctx, page = _page(browser, hub, hub.service_url + "/admin/", "ada")
    try:
        for path in ADMIN_PAGES:
            page.goto(hub.service_url + "/" + path)
            sync_api.expect(page.locator("main h1")).to_be_visible()
            wanted = page.evaluate("""() => [...document.querySelectorAll('a[href], button, input, select, textarea')]
                .filter(e => !e.disabled && e.offsetParent !== null).length""")
            reached = 0
            for _ in range(wanted + 5):
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement === document.body"):
                    break
                reached += 1
            assert reached >= wanted, f"/{path}: Tab reached {reached} of {wanted} controls"
            assert re.search(r"\S", page.locator("main h1").inner_text())
    finally:
        ctx.close()


def test_pages_reflow_at_320_css_pixels(busy_hub, browser):
    """WCAG 1.4.10: at 320 CSS pixels wide (a 1280 px window at 400% zoom) nothing but a data
    table (exempt: it needs two dimensions) makes the page scroll sideways."""
    hub = busy_hub
    ctx, page = _page(browser, hub, hub.service_url + "/admin/", "ada")
    try:
        page.set_viewport_size({"width": 320, "height": 640})
        for path in [""] + ADMIN_PAGES:
            page.goto(hub.service_url + "/" + path)
            sync_api.expect(page.locator("main h1")).to_be_visible()
            wide = page.evaluate("""() => [...document.querySelectorAll('body *')]
                .filter(e => !e.closest('table') && e.getBoundingClientRect().width > 0
                             && e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
                .map(e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : ''))""")
            assert not wide, f"/{path} at 320 px: wider than the window: {wide[:8]}"
    finally:
        ctx.close()
