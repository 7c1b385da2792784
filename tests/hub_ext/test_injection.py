"""Text that users (or admins, or the Kubernetes inventory) control, shown back by the platform.

Against a real hub, proxy and service; the pages in a real browser (the Debian
Chromium, driven by Playwright). Nothing is emulated.

- A workload name is free text shown to others: an admin's ``computehub queue --all``
  and ``computehub approvals`` print it to a terminal as is. Control characters
  (terminal escapes, line breaks, C1 controls, bidirectional overrides) are refused
  at submission with a 400; markup-looking text is kept as typed.
- Names of queues, nodes, users and groups are 1-63 of ``[A-Za-z0-9._@-]``; a trailing
  newline slipped through (``$`` matches before it) and is refused now.
- The service's pages show names, reasons, queue descriptions, node labels, class
  descriptions and audit data as text: no markup from them reaches the DOM, no script
  runs, and the text shows literally. The pages' Content-Security-Policy would block an
  injected inline handler anyway, so the test also fails on any CSP report in the console
  (it would mean markup got in) rather than trusting ``window.__xss`` alone.
"""

from __future__ import annotations

import pytest
from test_admin_pages import login

# <= 128 characters: a workload name.
NAME = """<img src=x onerror=window.__xss=1>"'><svg onload=window.__xss=2>&amp;"""
# Longer text (descriptions, reasons, label values); no runs of spaces (inner_text folds them).
TEXT = ("</p></td></table><script>window.__xss=3</script><img src=x onerror=window.__xss=4>"
        "\" onmouseover=\"window.__xss=5\" style=\"background:url(javascript:window.__xss=6)\" '><b>bold</b>")
LABEL_KEY = "<i>k</i>"

CONTROL = ["\x1b[2J\x1b[Hpwned", "two\nlines", "cr\rover", "tab\there", "bell\x07", "csi\x9b31m",
           "del\x7f", "\u202egnp.exe", "iso\u2066late\u2069", "line\u2028sep"]


@pytest.mark.parametrize("name", CONTROL, ids=[repr(n) for n in CONTROL])
def test_control_characters_in_a_workload_name_are_refused(hub, name):
    alice = hub.tokens["alice"]
    before = hub.call("GET", "/workloads?user=alice", alice).json()["total"]
    r = hub.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"cpu": "100m"}, "name": name})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error"] == "invalid" and "name must not contain control characters" in body["message"], body
    assert "\x1b" not in r.text and "\n" not in body["message"]      # the message itself is safe to print
    assert hub.call("GET", "/workloads?user=alice", alice).json()["total"] == before


@pytest.mark.parametrize("name", [NAME, "naïve run 🚀 — “quoted” 'x'", "a & b < c", ""])
def test_printable_workload_names_are_kept_as_typed(hub, name):
    alice = hub.tokens["alice"]
    r = hub.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"cpu": "100m"}, "name": name})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    try:
        assert hub.call("GET", f"/workloads/{wid}", alice).json()["name"] == name
    finally:
        hub.call("DELETE", f"/workloads/{wid}", alice)


@pytest.mark.parametrize("path,body", [
    ("/queues/inj%0A", {"parent": "org"}),
    ("/nodes/gpu-z%0A", {"gpus": 1, "cpu": 1, "memory": "1Gi"}),
    ("/classes/inj%0A", {"rank": 1}),
])
def test_a_trailing_newline_is_not_part_of_a_name(hub, path, body):
    r = hub.call("PUT", path, hub.tokens["ada"], json=body)
    assert r.status_code == 400, r.text
    assert "must be 1-63 letters" in r.json()["message"]


def _ok(r, *codes):
    assert r.status_code in (codes or (200, 201)), r.text
    return r.json()


@pytest.fixture
def hostile_hub(fresh_hub):
    """A hub whose every user-controlled text is markup: names, reasons, descriptions, labels."""
    h = fresh_hub.start()
    ada, alice, carol = h.tokens["ada"], h.tokens["alice"], h.tokens["carol"]
    # alice's gang fills both nodes; her next job waits, named like markup.
    _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 4}, "workers": 2}))
    h.waiting = _ok(h.call("POST", "/workloads", alice, json={"queue": "vision", "resources": {"gpu": 1},
                                                               "name": NAME}))
    # carol's requests above nlp's approval threshold: one waits for a decision, one is rejected.
    big = {"queue": "nlp", "resources": {"gpu": 4}, "workers": 2, "name": NAME}
    h.approval = _ok(h.call("POST", "/workloads", carol, json=big))
    rejected = _ok(h.call("POST", "/workloads", carol, json=big))
    assert h.approval["state"] == rejected["state"] == "awaiting_approval"
    _ok(h.call("POST", f"/approvals/{rejected['id']}", ada, json={"approve": False, "reason": TEXT}))
    _ok(h.call("PUT", "/queues/inj", ada, json={"parent": "org", "description": TEXT}))
    _ok(h.call("PUT", "/nodes/inj-node", ada, json={"gpus": 1, "cpu": 1, "memory": "1Gi", "draining": True,
                                                    "labels": {LABEL_KEY: TEXT}}))
    _ok(h.call("PUT", "/classes/inj", ada, json={"rank": 5, "description": "plain"}))
    _ok(h.call("PUT", "/classes/inj", ada, json={"rank": 5, "description": TEXT}))
    return h


def _check(page, url, texts, reports):
    page.goto(url)
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)        # an injected onerror/onload would have fired by now
    main = page.locator("main")
    body = main.inner_text()
    for t in texts:
        assert t in body, f"{url}: {t!r} is not shown literally"
    assert main.locator("img, svg, script, b, i").count() == 0, f"{url}: markup from data reached the DOM"
    assert page.evaluate("window.__xss") is None, f"{url}: injected script ran"
    assert not reports, f"{url}: {reports}"


@pytest.mark.slow
def test_pages_show_hostile_text_literally(hostile_hub, browser):
    hub = hostile_hub
    reports: list[str] = []

    def watch(page):
        page.on("console", lambda m: reports.append(m.text) if "Content Security Policy" in m.text else None)
        page.on("pageerror", lambda e: reports.append(str(e)))

    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    watch(page)
    try:
        admin = hub.service_url + "/admin/"
        login(page, hub, admin, "ada")
        _check(page, admin, [TEXT], reports)
        _check(page, admin + "nodes", [f"{LABEL_KEY}={TEXT}"], reports)
        _check(page, admin + "pending", [NAME], reports)
        assert page.locator(f"#w-{hub.waiting['id']}").inner_text().count(NAME) == 1
        _check(page, admin + "approvals", [NAME], reports)
        assert NAME in page.locator(f"#approval-{hub.approval['id']}").inner_text()
        _check(page, admin + "audit", [TEXT, f"description: plain → {TEXT}"], reports)
        # The node page's drain button keeps working next to the hostile labels.
        page.goto(admin + "nodes")
        page.click("button:has-text('Undrain inj-node')")
        page.wait_for_selector("#node-inj-node .drain-state:has-text('schedulable')")
        assert hub.call("GET", "/nodes/inj-node", hub.tokens["ada"]).json()["draining"] is False
    finally:
        ctx.close()

    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    watch(page)
    try:
        login(page, hub, hub.service_url + "/", "alice")
        _check(page, hub.service_url + "/", [NAME], reports)
    finally:
        ctx.close()
