"""Workload names, reasons and job logs shown in JupyterLab and in a notebook, with markup in them.

The side panel (plain DOM, ``textContent``) and the ``%submit`` display (a
text/html bundle, escaped) must show such text literally: no element from it
reaches the DOM and no script runs. JupyterLab sets no Content-Security-Policy
of its own, so an injected ``onerror`` would run here: ``window.__xss`` staying
undefined is the evidence.

Real: JupyterHub, configurable-http-proxy, the ComputeHub service, alice's
JupyterLab with this repository's extensions (the ``labhub`` fixture of
test_lab_browser.py), Chromium. Emulated there: the GPUs (NVML answers from a
file) and the job launcher (this test writes the job's log file where the
launcher would, in the service's logs directory).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright import sync_api

from labextension.magics import bundle, describe

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spawner"))
from localhub import hub_api, server_procs, wait_for, wait_ready  # noqa: E402
from test_lab_browser import labhub, open_lab, workload  # noqa: E402,F401 (a fixture)

NAME = """<img src=x onerror=window.__xss=1>"'><svg onload=window.__xss=2>&amp;"""
LOG = ["<script>window.__xss=3</script><img src=x onerror=window.__xss=4>",
       "\x1b[31mred\x1b[0m & <b>bold</b>"]


def _no_markup(page, where: str, bold: int = 0) -> None:
    """``bold``: how many <b> the view has of its own (the display's headline)."""
    page.wait_for_timeout(300)            # an injected onerror/onload would have fired by now
    assert page.locator(f"{where} img, {where} script").count() == 0, "markup from data in the DOM"
    assert page.locator(f"{where} b").count() == bold, "markup from data in the DOM"
    assert page.locator(f"{where} svg[onload]").count() == 0
    assert page.evaluate("window.__xss") is None, "injected script ran"


def test_submit_display_escapes_name_reason_and_log_lines(browser):
    """What ``%submit`` displays for a failed job (its name, reason and last log lines), as HTML."""
    w = {"id": "w0000001", "name": NAME, "state": "failed", "queue": "vision", "exit_code": 1,
         "reason": NAME, "started_at": 1.0, "ended_at": 61.0, "resources": {"gpu": 1}}
    for lines in (LOG, None):
        html = bundle(*describe(w, lines))["text/html"]
        page = browser.new_page()
        try:
            page.set_content(f"<html><body>{html}</body></html>")
            _no_markup(page, "body", bold=1)
            text = page.locator(".computehub-job").inner_text()
            assert f"w0000001 ({NAME}): failed" in text
            for expected in (LOG if lines else [NAME]):
                assert expected in text
        finally:
            page.close()


@pytest.mark.slow
def test_panel_shows_hostile_names_and_logs_literally(labhub, browser):
    hub = labhub
    r = hub_api(hub, "POST", "/users/alice/server", "alice")      # her notebook holds GPU 0 of 2
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice", timeout=150)
    alice = hub.tokens["alice"]
    r = hub.call("POST", "/workloads", alice, json={"name": NAME, "kind": "training", "resources": {"gpu": 2}})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    wait_for("the job to wait", lambda: workload(hub, job)["state"] == "pending", 30)
    logs = hub.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{job}.log").write_text("\n".join(LOG) + "\n")

    ctx = browser.new_context(viewport={"width": 1400, "height": 850})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        status = open_lab(page, hub)
        status.click()
        row = page.locator(f".jp-ComputeHub-workload[data-workload-id='{job}']")
        sync_api.expect(row).to_be_visible(timeout=30_000)
        sync_api.expect(row.locator(".jp-ComputeHub-name > span").first).to_have_text(NAME)
        sync_api.expect(row.locator(".jp-ComputeHub-reason")).to_contain_text("waiting in the queue: ")
        _no_markup(page, ".jp-ComputeHubPanel")

        row.locator(".jp-ComputeHub-logs-button").click()
        pre = page.locator(".jp-ComputeHub-logs-text")
        sync_api.expect(pre).to_contain_text("<script>window.__xss=3</script>")
        text = pre.text_content()
        assert text == "\n".join(LOG), repr(text)    # as written, escape sequences as characters
        _no_markup(page, ".jp-ComputeHubPanel")

        # Cancelled by someone else: a JupyterLab notification names it, literally too.
        assert hub.call("DELETE", f"/workloads/{job}", hub.launcher_token).status_code == 200
        toast = page.locator(".Toastify__toast", has_text="was cancelled")
        sync_api.expect(toast).to_contain_text(NAME, timeout=30_000)
        _no_markup(page, ".Toastify")
    finally:
        ctx.close()
        hub.call("DELETE", f"/workloads/{job}", alice)
    r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
    assert r.status_code in (202, 204), r.text
    wait_for("alice's server process to exit", lambda: "alice" not in server_procs(hub), 60)
