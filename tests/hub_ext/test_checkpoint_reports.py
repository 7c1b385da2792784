"""Running work reports its checkpoints through the real hub and proxy: the owner's job with
``POST workloads/{id}/checkpoint``, a launcher with a ``checkpoint`` status report (one or in a
batch). Only the owner (or an on-behalf caller) may report; bad reports are 4xx and change
nothing."""

from __future__ import annotations

import time


def _running(hub, user: str = "alice") -> str:
    """A workload of ``user``, admitted and reported running by the launcher."""
    tok = hub.tokens[user]
    r = hub.call("POST", "/workloads", tok,
                 json={"kind": "training", "name": "ckpt", "resources": {"cpu": "100m"}})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    deadline = time.time() + 15
    while hub.call("GET", f"/workloads/{wid}", tok).json()["state"] != "admitted":
        assert time.time() < deadline, f"{wid} not admitted"
        time.sleep(0.05)
    r = hub.call("POST", f"/workloads/{wid}/status", hub.launcher_token, json={"state": "running"})
    assert r.status_code == 200 and r.json()["state"] == "running", r.text
    return wid


def test_the_owners_job_reports_a_checkpoint(hub):
    wid = _running(hub)
    tok = hub.tokens["alice"]
    assert hub.call("GET", f"/workloads/{wid}", tok).json()["checkpointed_at"] is None
    time.sleep(0.2)
    before = time.time()
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", tok)          # no body: saved now
    assert r.status_code == 200, r.text
    saved = r.json()["checkpointed_at"]
    assert before - 1 <= saved <= time.time() + 1
    assert hub.call("GET", f"/workloads/{wid}", tok).json()["checkpointed_at"] == saved
    # An older save than the latest is kept out; a later one, with its time, counts.
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", tok, json={"at": saved - 0.01})
    assert r.status_code == 200 and r.json()["checkpointed_at"] == saved, r.text
    time.sleep(0.2)
    later = time.time() - 0.05
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", tok, json={"at": later})
    assert r.status_code == 200 and r.json()["checkpointed_at"] == later, r.text
    assert r.json()["checkpoint_seen_every"] == later - saved          # how often it saves


def test_only_the_owner_or_a_launcher_reports_and_bad_reports_are_refused(hub):
    wid = _running(hub)
    alice = hub.tokens["alice"]
    # bob (same group, no team-lead scope) does not see alice's work: 404, never 403.
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", hub.tokens["bob"])
    assert r.status_code == 404, r.text
    # lin, vision's team lead, sees it but may not act for alice.
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", hub.tokens["lin"])
    assert r.status_code == 403 and "report checkpoints" in r.json()["message"], r.text
    for body, words in (({"at": time.time() + 3600}, "not in the future"), ({"at": "now"}, "UNIX time"),
                        ({"at": True}, "UNIX time"), ({"when": 1}, "unknown field(s): when"),
                        ({"on_stop": "yes"}, "on_stop must be true or false")):
        r = hub.call("POST", f"/workloads/{wid}/checkpoint", alice, json=body)
        assert r.status_code == 400 and words in r.json()["message"], (body, r.text)
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", alice, json={"at": 1000.0})
    assert r.status_code == 409 and "older than the current run" in r.json()["message"], r.text
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", alice, json={"on_stop": True})
    assert r.status_code == 409 and "while it is being preempted" in r.json()["message"], r.text
    w = hub.call("GET", f"/workloads/{wid}", alice).json()
    assert w["checkpointed_at"] is None and w["saves_on_stop"] is False          # nothing changed
    # Work that has ended saves nothing.
    hub.call("POST", f"/workloads/{wid}/status", hub.launcher_token, json={"state": "finished"})
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", alice)
    assert r.status_code == 409 and "only running work" in r.json()["message"], r.text


def test_a_launcher_reports_checkpoints_with_its_status_reports(hub):
    a, b = _running(hub, "carol"), _running(hub, "carol")
    tok = hub.launcher_token
    started = hub.call("GET", f"/workloads/{a}", tok).json()["started_at"]
    time.sleep(0.3)
    r = hub.call("POST", f"/workloads/{a}/status", tok, json={"state": "checkpoint", "at": started + 0.25})
    assert r.status_code == 200 and r.json()["checkpointed_at"] == started + 0.25, r.text
    r = hub.call("POST", "/workloads/status", tok, json={"reports": [
        {"id": b, "state": "checkpoint"}, {"id": a, "state": "checkpoint", "at": -5}]})
    first, second = r.json()["results"]
    assert first["status"] == 200 and first["body"]["checkpointed_at"] >= started, first
    assert second["status"] == 400 and "UNIX time" in second["message"], second
    assert hub.call("GET", f"/workloads/{a}", tok).json()["checkpointed_at"] == started + 0.25


def test_a_job_reports_with_its_own_report_token_and_nothing_else(hub):
    """Jobs on Kubernetes carry no hub token: the launcher hands each its report token
    ($COMPUTEHUB_REPORT_TOKEN), good for this workload's checkpoint reports only."""
    wid, other = _running(hub, "alice"), _running(hub, "carol")
    launcher = hub.launcher_token
    token = hub.call("GET", f"/workloads/{wid}", launcher).json()["report_token"]
    assert token.startswith("chrt_")
    listed = {w["id"]: w for w in hub.call("GET", "/workloads?state=running&limit=10000", launcher).json()["workloads"]}
    assert listed[wid]["report_token"] == token and listed[other]["report_token"] != token
    assert hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()["report_token"] == token   # the owner
    assert "report_token" not in hub.call("GET", f"/workloads/{wid}", hub.tokens["lin"]).json()       # a team lead
    # Work that holds no GPUs yet has nothing to report (3 × 4 GPUs on 8: one at least waits).
    big = [hub.call("POST", "/workloads", hub.tokens["alice"], json={"kind": "batch", "resources": {"gpu": 4}}).json()
           for _ in range(3)]
    time.sleep(0.5)
    seen = [hub.call("GET", f"/workloads/{w['id']}", launcher).json() for w in big]
    assert any(w["state"] == "pending" for w in seen), seen
    assert all(("report_token" in w) == (w["state"] in ("admitted", "running")) for w in seen), seen
    for w in big:
        hub.call("DELETE", f"/workloads/{w['id']}", hub.tokens["alice"])

    r = hub.call("POST", f"/workloads/{wid}/checkpoint", token)
    assert r.status_code == 200 and r.json()["checkpointed_at"] is not None, r.text
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", headers={"Authorization": f"Bearer {token}"},
                 json={"on_stop": "yes"})
    assert r.status_code == 400 and "on_stop must be true or false" in r.json()["message"], r.text

    # Not another workload's, not forged, and nothing but this report.
    for path, tok in ((f"/workloads/{other}/checkpoint", token), (f"/workloads/{wid}/checkpoint", "chrt_" + "0" * 64),
                      ("/workloads/w-none/checkpoint", token)):
        r = hub.call("POST", path, tok)
        assert r.status_code == 403 and "report token is not the one of workload" in r.json()["message"], (path, r.text)
    assert hub.call("GET", f"/workloads/{other}", launcher).json()["checkpointed_at"] is None
    for method, path in (("GET", f"/workloads/{wid}"), ("DELETE", f"/workloads/{wid}"), ("GET", "/workloads"),
                         ("POST", f"/workloads/{wid}/status")):
        r = hub.call(method, path, token, json={"state": "finished"} if method == "POST" else None)
        assert r.status_code in (401, 403), (method, path, r.status_code, r.text)
    assert hub.call("GET", f"/workloads/{wid}", launcher).json()["state"] == "running"

    # Once the work has ended there is no token to hand out, and the old one saves nothing.
    hub.call("POST", f"/workloads/{wid}/status", launcher, json={"state": "finished"})
    assert "report_token" not in hub.call("GET", f"/workloads/{wid}", launcher).json()
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", token)
    assert r.status_code == 409 and "only running work" in r.json()["message"], r.text


def test_a_report_token_dies_with_its_run(hub):
    """Admitted again (here after its node was lost), the workload's run is new and so is its
    token: a process left over from the earlier run reports nothing for this one."""
    wid, launcher = _running(hub), hub.launcher_token
    old = hub.call("GET", f"/workloads/{wid}", launcher).json()["report_token"]
    r = hub.call("POST", f"/workloads/{wid}/status", launcher,
                 json={"state": "failed", "exit_code": 137, "node_lost": True, "reason": "node gone"})
    assert r.status_code == 200, r.text
    deadline = time.time() + 15
    while (w := hub.call("GET", f"/workloads/{wid}", launcher).json())["state"] != "admitted":
        assert time.time() < deadline, w
        time.sleep(0.05)
    hub.call("POST", f"/workloads/{wid}/status", launcher, json={"state": "running"})
    new = hub.call("GET", f"/workloads/{wid}", launcher).json()["report_token"]
    assert new != old
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", old)
    assert r.status_code == 403 and "a token of an earlier run of it is void" in r.json()["message"], r.text
    assert hub.call("GET", f"/workloads/{wid}", launcher).json()["checkpointed_at"] is None
    r = hub.call("POST", f"/workloads/{wid}/checkpoint", new)
    assert r.status_code == 200 and r.json()["checkpointed_at"] is not None, r.text
