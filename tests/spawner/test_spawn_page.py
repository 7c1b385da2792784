"""The hub's spawn-pending page in a real browser while a notebook waits for a GPU (issue 4).

Same hub as ``test_local_spawner.py`` (real JupyterHub + proxy + ComputeHub, the
real QueuedSimpleLocalProcessSpawner, one simulated 1-GPU node "local", queue
vision guaranteed 1 GPU). alice takes the GPU through the REST API; bob logs in
through the hub's login form in Chromium (the Debian package, driven by
Playwright) and asks for his server from the browser. His spawn-pending page
shows "Queued: position 1 in vision, ETA … — <reason>"; a screenshot is kept in
``test-artifacts/spawn-pending.png``. Then alice's server is stopped through the
API, and the very same page, untouched, moves on: it shows the admission,
reaches ready and takes bob to his server at ``/user/bob/``.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from playwright import sync_api

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from test_admin_pages import ARTIFACTS  # noqa: E402
from hub_login import fill_hub_login  # noqa: E402
from localhub import hub_api, server_model, server_procs, wait_for, wait_ready  # noqa: E402
from test_local_spawner import latest, qhub  # noqa: E402,F401 - qhub is a fixture


pytestmark = pytest.mark.slow


def test_spawn_page_shows_queue_position_then_moves_on(qhub, browser, tmp_path):
    hub = qhub
    # alice holds the only GPU.
    r = hub_api(hub, "POST", "/users/alice/server", "alice")
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice")
    wa = latest(hub, "alice")
    assert wa["state"] == "running" and wa["placement"] == [{"node": "local", "gpus": [0]}], wa

    ctx = browser.new_context(viewport={"width": 1100, "height": 700})
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    try:
        # bob logs in through the hub's form and starts his server from the browser.
        page.goto(hub.url + "/hub/spawn")
        fill_hub_login(page, "bob")
        page.wait_for_url(re.compile(r".*/hub/spawn-pending/bob.*"))
        pending_url = page.url

        # The page's progress text says where bob stands and why.
        message = page.locator("#progress-message")
        sync_api.expect(message).to_contain_text("position 1", timeout=30_000)
        text = message.inner_text()
        assert text.startswith("Queued: position 1 in vision, ETA"), text
        reason = text.split(" — ", 1)[1]
        assert reason and "waiting for the next scheduling cycle" not in reason, text
        sync_api.expect(page.locator("#progress-log")).to_contain_text("position 1 in vision")
        shot = tmp_path / "spawn-pending.png"
        page.screenshot(path=str(shot), full_page=True)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copyfile(shot, ARTIFACTS / "spawn-pending.png")
        wb = latest(hub, "bob")
        assert wb["state"] == "pending" and wb["kind"] == "notebook", wb
        assert (server_model(hub, "bob") or {}).get("pending") == "spawn"
        assert page.url == pending_url

        # alice stops through the API; bob's page follows by itself: admitted, ready, redirected.
        r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
        assert r.status_code in (202, 204), r.text
        sync_api.expect(page.locator("#progress-log")).to_contain_text("Admitted: local GPU 0", timeout=30_000)
        page.wait_for_url(re.compile(r".*/user/bob/.*"), timeout=60_000)
        assert (server_model(hub, "bob") or {}).get("ready") is True
        assert latest(hub, "bob")["state"] == "running"
        procs = server_procs(hub)
        assert "alice" not in procs and procs["bob"][1]["CUDA_VISIBLE_DEVICES"] == "0"
    finally:
        ctx.close()

    # Clean up: bob's server stops, his workload ends and the GPU is free again.
    r = hub_api(hub, "DELETE", "/users/bob/server", "bob")
    assert r.status_code in (202, 204), r.text
    # The local spawner stops a server with SIGINT, then SIGTERM and SIGKILL (up to ~20 s), and
    # then reports its end: a loaded machine needs more than 30 s (the state it stayed in is said).
    deadline = time.time() + 60
    while (state := hub.call("GET", f"/workloads/{wb['id']}", hub.launcher_token).json()["state"]) != "finished" \
            and time.time() < deadline:
        time.sleep(0.2)
    assert state == "finished", state
    wait_for("bob's server process to exit", lambda: "bob" not in server_procs(hub), 30)
    node = hub.call("GET", "/nodes/local", hub.tokens["ada"])
    assert node.status_code == 200 and node.json()["free_gpus"] == [0], node.text
