"""Accessibility of the hub's spawn-pending page while a notebook waits in the queue.

Same hub as ``test_spawn_page.py`` (real JupyterHub + proxy + ComputeHub, the real
QueuedSimpleLocalProcessSpawner, one simulated 1-GPU node "local"; Chromium, the Debian
package, driven by Playwright). alice holds the GPU; bob's spawn waits and his page says
"Queued: position 1 in vision, ETA … — <reason>". axe-core (WCAG 2.1 A/AA) checks the
page in that state, and the queue text must be in a polite live region: a screen reader
announces it when it changes, without taking the focus away.

The page is JupyterHub's (spawn_pending.html); ComputeHub provides the progress messages
and, through its hub templates, the live region around them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from playwright import sync_api

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from a11y import assert_accessible  # noqa: E402
from hub_login import fill_hub_login  # noqa: E402
from localhub import hub_api, wait_for, wait_ready  # noqa: E402
from test_local_spawner import latest, qhub  # noqa: E402,F401 - qhub is a fixture

pytestmark = pytest.mark.slow

# Which element is live, and how: "polite" from aria-live, or implied by role=status.
LIVE = """sel => { const e = document.querySelector(sel); if (!e) return null;
    const live = e.closest('[aria-live], [role=status], [role=log]');
    return live ? {live: live.getAttribute('aria-live') || {status: 'polite', log: 'polite'}[live.getAttribute('role')],
                   id: live.id, atomic: live.getAttribute('aria-atomic') || (live.getAttribute('role') === 'status' ? 'true' : null)}
                : {live: null}; }"""


def test_queued_spawn_page_is_accessible_and_announces_the_queue(qhub, browser):
    hub = qhub
    r = hub_api(hub, "POST", "/users/alice/server", "alice")
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice")

    ctx = browser.new_context(viewport={"width": 1100, "height": 700})
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(hub.url + "/hub/spawn")
        fill_hub_login(page, "bob")
        page.wait_for_url(re.compile(r".*/hub/spawn-pending/bob.*"))
        message = page.locator("#progress-message")
        sync_api.expect(message).to_contain_text("position 1", timeout=30_000)
        assert " — " in message.inner_text()          # the reason is there

        # The page in its queued state, with the event log open.
        page.locator("#progress-details summary").click()
        # Excluded: JupyterHub's progress bar (spawn_pending.html has role=progressbar without a
        # name: aria-progressbar-name). It is JupyterHub's markup, not ComputeHub's.
        assert_accessible(page, "spawn-pending page (queued)", exclude=["#progress-bar"])

        # The queue position and reason are announced politely when they change.
        live = page.evaluate(LIVE, "#progress-message")
        assert live["live"] == "polite", f"the queue position is not in a polite live region: {live}"
        assert live["atomic"] == "true", f"a change would be read without its context: {live}"
        # The event log below repeats every message: it must not be read out as well.
        log_live = page.evaluate(LIVE, "#progress-log")
        assert log_live["live"] in (None, "off"), f"the event log is live too (everything read twice): {log_live}"

        wb = latest(hub, "bob")
        assert wb["state"] == "pending", wb
    finally:
        ctx.close()
    for user in ("bob", "alice"):
        hub_api(hub, "DELETE", f"/users/{user}/server", user)
    wait_for("both servers to stop", lambda: all(
        not (hub_api(hub, "GET", f"/users/{u}", u).json()["servers"].get("")) for u in ("alice", "bob")), 60)
