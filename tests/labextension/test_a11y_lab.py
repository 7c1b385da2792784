"""Accessibility of the ComputeHub side panel and status bar item in a real JupyterLab.

Real: JupyterHub, configurable-http-proxy, the ComputeHub service, alice's JupyterLab
with this repository's extensions, Chromium (the ``labhub`` fixture of
test_lab_browser.py). Emulated there: the GPUs (NVML answers from a file) and the job
launcher (this test reports a job running, as a launcher would).

alice's notebook holds GPU 0, bob's job GPU 1; alice's training job waits with a reason
and her second one behind it. With the panel open axe-core (WCAG 2.1 A/AA) checks the
whole page; what it finds in JupyterLab's own markup is excluded by the selector of
that element. The status bar item opens the panel from the keyboard; the panel keeps the
keyboard focus while it redraws every poll; the queue position and reason are in a polite
live region that stays in place and is updated only when what it says changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import requests
from playwright import sync_api

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spawner"))
from a11y import (assert_accessible, focus_outline, focus_steadily, focus_visible, focus_visibly,  # noqa: E402
                  shows_focus)
from localhub import hub_api, server_procs, wait_for, wait_ready  # noqa: E402
from test_lab_browser import labhub, open_lab, workload  # noqa: E402,F401 (a fixture)

pytestmark = pytest.mark.slow

# Found in JupyterLab's own markup, not ours. JupyterLab 4's file browser toolbar: two of its
# <jp-button>s carry aria-pressed, which their role does not allow (aria-allowed-attr).
LAB_MARKUP = ['.jp-FileBrowser-toolbar jp-button[title="Upload Files"]',
              '.jp-FileBrowser-toolbar jp-button[data-command="filebrowser:toggle-file-filter"]']

LIVE = ".jp-ComputeHubPanel [aria-live=polite]"


def _submit(hub, user, name, **kw):
    body = {"name": name, "kind": "training", "resources": {"gpu": 1}}
    r = hub.call("POST", "/workloads", hub.tokens[user], json=dict(body, **kw))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _explained(hub, wid):
    w = workload(hub, wid)
    return w if w["state"] == "pending" and w["explanation"]["reason"] != "waiting for the next scheduling cycle" \
        else None


def test_panel_and_status_item_are_accessible(labhub, browser):
    hub = labhub
    r = hub_api(hub, "POST", "/users/alice/server", "alice")      # her notebook holds GPU 0 of 2
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice", timeout=150)
    bob = _submit(hub, "bob", "bob-train", time_limit=600)
    wait_for("bob's job to be admitted", lambda: workload(hub, bob)["state"] == "admitted", 30)
    first = _submit(hub, "alice", "alice-train")
    second = _submit(hub, "alice", "alice-sweep")
    w = wait_for("alice's job explained", lambda: _explained(hub, first), 30)
    log = hub.data_dir / "logs" / f"{first}.log"          # where the launcher would write it
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"step {i}: loss {1 / (i + 1):.4f}\n" for i in range(200)))
    wait_for("alice's second job explained", lambda: _explained(hub, second), 30)

    ctx = browser.new_context(viewport={"width": 1400, "height": 850})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        status = open_lab(page, hub)
        sync_api.expect(status).to_contain_text("Queued #1", timeout=30_000)

        # The status bar item is a button: focusable, named, and Enter opens the panel.
        assert status.get_attribute("role") == "button" and status.get_attribute("tabindex") == "0"
        shown = focus_visibly(status)
        assert shows_focus(shown), shown
        page.keyboard.press("Enter")
        row = page.locator(f".jp-ComputeHub-workload[data-workload-id='{first}']")
        sync_api.expect(row).to_be_visible(timeout=15_000)
        sync_api.expect(row.locator(".jp-ComputeHub-reason")).to_contain_text(w["explanation"]["reason"])

        # axe: the whole page, with the panel open and alice's work waiting.
        assert_accessible(page, "JupyterLab with the ComputeHub panel (queued)", exclude=LAB_MARKUP)

        # A polite live region says where each waiting job stands and why; it is one element for
        # the panel's life (redraws keep it) and changes only when what it says changes.
        live = page.locator(LIVE)
        sync_api.expect(live).to_have_count(1)
        sync_api.expect(live).to_contain_text(f"alice-train: waiting, position 1 of 2 in vision")
        sync_api.expect(live).to_contain_text(w["explanation"]["reason"])
        sync_api.expect(live).to_contain_text("alice-sweep: waiting, position 2 of 2 in vision")
        page.evaluate("""sel => {
            const e = document.querySelector(sel);
            e.__kept = true;
            window.__liveChanges = 0;
            new MutationObserver(() => window.__liveChanges++).observe(e, {childList: true, subtree: true,
                                                                            characterData: true});
        }""", LIVE)
        page.wait_for_timeout(5_000)             # two polls: the panel redraws, nothing new to say
        assert page.evaluate("sel => document.querySelector(sel).__kept === true", LIVE), "live region replaced"
        assert page.evaluate("window.__liveChanges") == 0, "the live region changed with nothing new to say"

        # Keyboard: focus the first job's Logs button; it keeps the focus across redraws.
        logs = row.locator(".jp-ComputeHub-logs-button")
        focus_steadily(logs)
        page.wait_for_timeout(5_000)             # two polls, two redraws
        assert page.evaluate(f"""() => document.activeElement.matches(
            ".jp-ComputeHub-workload[data-workload-id='{first}'] .jp-ComputeHub-logs-button")"""), \
            f"the focus left the Logs button on a redraw: {focus_outline(page)}"
        assert focus_visible(page), focus_outline(page)
        # Its logs (longer than the box shows) open from the keyboard, with the focus on them (the
        # box scrolls with the arrow keys); Close, next to them, gives the focus back to Logs.
        page.keyboard.press("Enter")
        text = page.locator(".jp-ComputeHub-logs-text")
        sync_api.expect(text).to_contain_text("step 199")
        assert_accessible(page, "JupyterLab with the ComputeHub panel (logs open)", exclude=LAB_MARKUP)
        sync_api.expect(text).to_be_focused()
        assert focus_visible(page), focus_outline(page)
        page.keyboard.press("Shift+Tab")
        sync_api.expect(page.locator(".jp-ComputeHub-logs button")).to_be_focused()
        page.keyboard.press("Enter")
        sync_api.expect(text).to_have_count(0)
        sync_api.expect(logs).to_be_focused()
        # Cancel alice-sweep with the keyboard: Tab along to its Cancel, Enter, Enter to confirm.
        sweep_cancel = f".jp-ComputeHub-workload[data-workload-id='{second}'] .jp-ComputeHub-cancel"
        for _ in range(10):
            page.keyboard.press("Tab")
            if page.evaluate(f"() => document.activeElement.matches(\"{sweep_cancel}\")"):
                break
        else:
            raise AssertionError(f"Tab did not reach alice-sweep's Cancel: {focus_outline(page)}")
        assert focus_visible(page), focus_outline(page)
        page.keyboard.press("Enter")
        sync_api.expect(page.locator(sweep_cancel)).to_have_text("Really cancel?")
        assert page.evaluate(f"() => document.activeElement.matches(\"{sweep_cancel}\")"), focus_outline(page)
        page.keyboard.press("Enter")
        wait_for("alice-sweep to be cancelled", lambda: workload(hub, second)["state"] == "cancelled", 30)

        # bob's job ends: alice-train is admitted and runs; the live region says so, once.
        assert hub.call("DELETE", f"/workloads/{bob}", hub.tokens["bob"]).status_code == 200
        wait_for("alice's job to be admitted", lambda: workload(hub, first)["state"] == "admitted", 30)
        r = hub.call("POST", f"/workloads/{first}/status", hub.launcher_token, json={"state": "running"})
        assert r.status_code == 200, r.text
        sync_api.expect(live).to_contain_text("alice-train: running", timeout=30_000)
        assert page.evaluate("sel => document.querySelector(sel).__kept === true", LIVE), "live region replaced"
        assert "position" not in live.inner_text()
        assert_accessible(page, "JupyterLab with the ComputeHub panel (running)", exclude=LAB_MARKUP)
    finally:
        ctx.close()
        for wid in (first, second, bob):
            hub.call("DELETE", f"/workloads/{wid}", hub.tokens["alice" if wid != bob else "bob"])
    r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
    assert r.status_code in (202, 204), r.text
    wait_for("alice's server process to exit", lambda: "alice" not in server_procs(hub), 60)


def test_panel_is_accessible_in_the_dark_theme(labhub, browser):
    """The same checks of contrast and names with JupyterLab's dark theme (set through Lab's
    settings API before the page loads, as the Settings menu would)."""
    hub = labhub
    r = hub_api(hub, "POST", "/users/alice/server", "alice")
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice", timeout=150)
    r = requests.put(f"{hub.url}/user/alice/lab/api/settings/@jupyterlab/apputils-extension:themes",
                     headers={"Authorization": f"token {hub.tokens['alice']}"}, timeout=30,
                     json={"raw": json.dumps({"theme": "JupyterLab Dark"})})
    assert r.status_code in (200, 204), r.text
    job = _submit(hub, "alice", "alice-train", resources={"gpu": 2})     # waits: GPU 0 is her notebook's
    w = wait_for("alice's job explained", lambda: _explained(hub, job), 30)

    ctx = browser.new_context(viewport={"width": 1400, "height": 850})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        status = open_lab(page, hub)
        sync_api.expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
        sync_api.expect(status).to_contain_text("Queued #1", timeout=30_000)
        shown = focus_visibly(status)
        assert shows_focus(shown), shown
        page.keyboard.press("Enter")
        row = page.locator(f".jp-ComputeHub-workload[data-workload-id='{job}']")
        sync_api.expect(row.locator(".jp-ComputeHub-reason")).to_contain_text(w["explanation"]["reason"])
        assert_accessible(page, "JupyterLab (dark theme) with the ComputeHub panel", exclude=LAB_MARKUP)
        shown = focus_visibly(row.locator(".jp-ComputeHub-logs-button"))
        assert shows_focus(shown), shown
    finally:
        ctx.close()
        hub.call("DELETE", f"/workloads/{job}", hub.tokens["alice"])
    r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
    assert r.status_code in (202, 204), r.text
    wait_for("alice's server process to exit", lambda: "alice" not in server_procs(hub), 60)
