"""Work that runs after other work (``after``) through the real hub, proxy and service: the CLI's
``--after``, the API's answers and errors, the queue's reason, release and cancellation."""

from __future__ import annotations

import json
import re
import time

import requests

from test_cli_client import admitted, cli, ok, one_line_error, submit, submitted  # noqa: F401


def until(hub, user: str, wid: str, states: tuple[str, ...], within: float = 15.0) -> dict:
    deadline = time.time() + within
    while True:
        w = hub.call("GET", f"/workloads/{wid}", hub.tokens[user]).json()
        if w["state"] in states:
            return w
        assert time.time() < deadline, w
        time.sleep(0.1)


def report(hub, wid: str, state: str, **extra) -> None:
    r = hub.call("POST", f"/workloads/{wid}/status", hub.launcher_token, json={"state": state, **extra})
    assert r.status_code == 200, r.text


def test_held_until_what_it_runs_after_finishes(hub, submitted):  # noqa: F811
    small = ("--kind", "batch", "--gpus", "0", "--cpu", "100m")
    first = admitted(hub, submitted, "alice", *small, "--name", "dep-first")
    out = ok(cli(hub, "alice", "submit", *small, "--name", "dep-then", "--after", first["id"].lstrip("w0")))
    then_id = out.split()[0]
    submitted.append(("alice", then_id))
    assert out.split()[1] == "held" and f"(runs after {first['id']} finishes (it is admitted))" in out, out
    w = hub.call("GET", f"/workloads/{then_id}", hub.tokens["alice"]).json()
    assert w["after"] == [f"{first['id']}:ok"] and w["eligible_at"] is None
    assert "position" not in w and w["explanation"]["reason"] == f"runs after {first['id']} finishes (it is admitted)"

    report(hub, first["id"], "running")
    row = next(r for r in ok(cli(hub, "alice", "queue")).splitlines() if r.startswith(then_id))
    assert " held " in row and row.endswith(f"runs after {first['id']} finishes (it is running)"), row
    row = next(r for r in ok(cli(hub, "alice", "jobs")).splitlines() if r.startswith(then_id))
    assert "held" in row and f"runs after {first['id']}" in row, row
    listed = hub.call("GET", "/workloads?state=held", hub.tokens["alice"]).json()["workloads"]
    assert then_id in [x["id"] for x in listed]
    time.sleep(1.5)          # cycles pass: still held
    assert hub.call("GET", f"/workloads/{then_id}", hub.tokens["alice"]).json()["state"] == "held"
    metrics = requests.get(hub.service_url + "/metrics", headers={"Authorization": f"token {hub.tokens['ada']}"},
                           timeout=10).text
    assert re.search(r'^computehub_workloads\{priority="preemptible",queue="vision",state="held"\} [1-9]',
                     metrics, re.M), metrics

    report(hub, first["id"], "finished")
    w = until(hub, "alice", then_id, ("admitted", "running"))
    assert w["eligible_at"] > w["submitted_at"]
    events = hub.call("GET", f"/audit?workload={then_id}", hub.tokens["ada"]).json()["events"]
    assert [e["reason"] for e in events if e["kind"] == "released"] == [f"{first['id']} finished"]


def test_held_work_says_when_it_would_start_once_what_it_runs_after_ends(hub, submitted):  # noqa: F811
    small = ("--kind", "batch", "--gpus", "0", "--cpu", "100m")
    first = admitted(hub, submitted, "alice", *small, "--time", "1h", "--name", "dep-timed")
    started = hub.call("GET", f"/workloads/{first['id']}", hub.tokens["alice"]).json()["admitted_at"]
    then = submit(hub, submitted, "alice", *small, "--time", "10m", "--after", first["id"])
    last = submit(hub, submitted, "alice", *small, "--time", "10m", "--after", then["id"])
    e = hub.call("GET", f"/workloads/{then['id']}", hub.tokens["alice"]).json()["explanation"]
    # It joins the line when dep-timed's hour is up, and there is room for it then.
    assert abs(e["eta"] - (started + 3600)) < 1 and 3000 < e["eta_seconds"] <= 3600, e
    assert e["eta_reason"].startswith("if what it runs after finishes by its declared time limit"), e
    assert e["reason"] == f"runs after {first['id']} finishes (it is admitted)"
    e = hub.call("GET", f"/workloads/{last['id']}", hub.tokens["alice"]).json()["explanation"]
    assert abs(e["eta"] - (started + 3600 + 600)) < 1, e        # after the one after it, in turn
    row = next(r for r in ok(cli(hub, "alice", "queue")).splitlines() if r.startswith(then["id"]))
    assert re.search(r" held .* (5\dm(\d+s)?|1h(\d+m)?) ", row), row      # the ETA column: about an hour
    # A change tried on it says when it would start with it, from when what it runs after ends.
    out = ok(cli(hub, "ada", "update", last["id"], "--time", "5m", "--test-only"))
    assert re.search(r"limit 300 s; starts in 1h(9|10)m once what it runs after ends \(now: starts in 1h(9|10)m "
                     r"once what it runs after ends\); nothing changed$", out.strip()), out
    r = hub.call("POST", f"/workloads/{then['id']}/hold", hub.tokens["alice"], json={})
    assert r.status_code == 200, r.text
    deadline = time.time() + 10      # explanations are made once a cycle: the next one sees the hold
    while (e := hub.call("GET", f"/workloads/{last['id']}", hub.tokens["alice"]).json()["explanation"])["eta"] \
            and time.time() < deadline:
        time.sleep(0.2)
    assert e["eta"] is None and e["eta_reason"] == (
        f"{then['id']}, which it waits on, is held by hand: no start estimate until it is released"), e


def test_what_can_never_run_is_cancelled_saying_why(hub, submitted):  # noqa: F811
    small = ("--kind", "batch", "--gpus", "0", "--cpu", "100m")
    first = admitted(hub, submitted, "alice", *small)
    then = submit(hub, submitted, "alice", *small, "--after", first["id"])
    cleanup = submit(hub, submitted, "alice", *small, "--after", f"{first['id']}:failed")
    report(hub, first["id"], "failed", exit_code=3, reason="CUDA out of memory")
    w = until(hub, "alice", then["id"], ("cancelled",))
    assert w["reason"] == (f"{first['id']} failed: CUDA out of memory, and this was to run after it finishes")
    until(hub, "alice", cleanup["id"], ("admitted", "running"))
    # Submitting after it again is refused at once, saying why.
    line = one_line_error(cli(hub, "alice", "submit", *small, "--after", first["id"]))
    assert f"{first['id']} failed: CUDA out of memory; work to run after it finishes would never start" in line


def test_bad_or_foreign_dependencies_are_refused(hub, submitted):  # noqa: F811
    theirs = submit(hub, submitted, "carol", "--kind", "batch", "--gpus", "0", "--cpu", "100m")
    before = {w["id"] for w in json.loads(ok(cli(hub, "alice", "queue", "--json")))["workloads"]}
    for after, says in ((theirs["id"], f"no workload {theirs['id']} of alice's to run after"),
                        ("w1:later", "'w1:later' is not a workload id"),
                        ("w99999999", "no workload w99999999 of alice's")):
        line = one_line_error(cli(hub, "alice", "submit", "--gpus", "0", "--cpu", "100m", "--after", after))
        assert says in line, line
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json={"resources": {"cpu": "100m"}, "after": "w1"})
    assert r.status_code == 400 and "after must be a list of workload ids" in r.json()["message"]
    after = {w["id"] for w in json.loads(ok(cli(hub, "alice", "queue", "--json")))["workloads"]}
    assert after <= before              # nothing was accepted
