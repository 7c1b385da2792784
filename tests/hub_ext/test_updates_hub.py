"""Changing waiting work through the real hub, proxy and service with the installed CLI
(``computehub update``) and the REST API (``PATCH api/v1/workloads/{id}``): what it asks for,
its limit (more time only from an admin), another queue only if open to the user, a whole job
array at once, the approval threshold, and bad input refused in one line, nothing changed."""

from __future__ import annotations

import json
import time

from test_cli_client import admitted, cli, ok, one_line_error, submit, submitted  # noqa: F401

GANG = ("--kind", "batch", "--gpus", "4", "--workers", "2", "--time", "1h")      # every GPU of the hub


def _get(hub, user, wid):
    return hub.call("GET", f"/workloads/{wid}", hub.tokens[user]).json()


def test_update_waiting_work_from_the_command_line(hub, submitted):  # noqa: F811
    blocker = admitted(hub, submitted, "bob", *GANG)
    w = submit(hub, submitted, "alice", "--kind", "batch", "--gpus", "4", "--time", "2h", "--name", "big")
    wid = w["id"]
    out = ok(cli(hub, "alice", "update", wid, "--gpus", "2", "--memory", "8Gi", "--time", "30m", "--name", "small"))
    assert out.strip() == f"{wid}  pending  queue vision, 2, limit 1800 s", out
    now = _get(hub, "alice", wid)
    assert (now["resources"], now["time_limit"], now["name"]) == (
        {"gpu": 2, "memory": 8 * 2**30}, 1800, "small")
    line = one_line_error(cli(hub, "alice", "update", wid, "--time", "3h"))
    assert f"only an admin may give workload {wid} more time (1800 s now, 10800 s asked)" in line, line
    assert ok(cli(hub, "ada", "update", wid, "--time", "3h")).split()[:2] == [wid, "pending"]
    assert _get(hub, "alice", wid)["time_limit"] == 10800
    line = one_line_error(cli(hub, "alice", "update", wid, "--queue", "nlp"))
    assert "queue 'nlp' is open to groups nlp, not to yours" in line, line
    line = one_line_error(cli(hub, "carol", "update", wid, "--name", "mine"))
    assert f"no workload '{wid}'" in line, line
    line = one_line_error(cli(hub, "bob", "update", blocker["id"], "--gpus", "1"))
    assert "is admitted: only its name, time_limit, checkpoint_every can change now, not resources" in line, line
    assert ok(cli(hub, "bob", "update", blocker["id"], "--time", "45m")).split()[:2] == [blocker["id"], "admitted"]
    line = one_line_error(cli(hub, "alice", "update", wid, "--gpus", "two"))
    assert "--gpus is a whole number, not 'two'" in line, line
    line = one_line_error(cli(hub, "alice", "update", wid))
    assert "say what to change" in line, line
    events = hub.call("GET", f"/audit?workload={wid}&kind=updated", hub.tokens["ada"]).json()["events"]
    assert [(e["reason"], e["data"]["actor"]) for e in events] == [
        ("name, request, time_limit", "alice"), ("time_limit", "ada")]
    assert events[0]["data"]["before"]["time_limit"] == 7200 and events[0]["data"]["after"]["name"] == "small"


def test_update_a_whole_array_and_bad_requests(hub, submitted):  # noqa: F811
    admitted(hub, submitted, "bob", *GANG)
    first = submit(hub, submitted, "alice", "--kind", "batch", "--gpus", "1", "--array", "0-2")
    submitted.extend(("alice", t) for t in first["tasks"][1:])
    out = ok(cli(hub, "alice", "update", "--array", first["id"], "--memory", "1Gi", "--json"))
    answer = json.loads(out)
    assert answer["tasks"] == first["tasks"]
    assert all(_get(hub, "alice", t)["resources"]["memory"] == 2**30 for t in first["tasks"])
    wid = first["tasks"][1]
    for query, body, words in (
            ("", {"kind": "training"}, "kind cannot be changed; what can: name, resources"),
            ("", {"resources": {"gpu": "many"}}, "gpu"),
            ("", {"resources": {"gpu": 3}, "workers": 4}, "gang of 4 × 3 GPUs is larger than the cluster"),
            ("", [1], "body must be a JSON object"),
            ("?tasks=some", {"name": "x"}, "tasks must be 'one' (this workload) or 'all'"),
            ("?state=held", {"name": "x"}, "state picks which waiting tasks of a job array change, with tasks=all"),
            ("?tasks=all&state=running", {"name": "x"}, "any of pending, held, awaiting_approval"),
            ("", {"name": "x" * 129}, "name must be text of at most 128 characters")):
        r = hub.call("PATCH", f"/workloads/{wid}{query}", hub.tokens["alice"], json=body)
        assert r.status_code == 400 and words in r.json()["message"], (body, r.status_code, r.text)
    assert _get(hub, "alice", wid)["resources"] == {"gpu": 1, "memory": 2**30}
    # Only the tasks waiting in a state (a row of the lab panel): one held, the others left as they are.
    assert hub.call("POST", f"/workloads/{wid}/hold", hub.tokens["alice"], json={}).status_code == 200
    r = hub.call("PATCH", f"/workloads/{first['id']}?tasks=all&state=held", hub.tokens["alice"], json={"name": "h"})
    assert r.status_code == 200 and r.json()["tasks"] == [wid], r.text
    assert [_get(hub, "alice", t)["name"] for t in first["tasks"]] == ["", "h", ""]


def test_growing_above_the_threshold_waits_for_an_admin_again(hub, submitted):  # noqa: F811
    w = submit(hub, submitted, "carol", "--kind", "batch", "--gpus", "4", "--queue", "nlp", "--hold")
    out = ok(cli(hub, "carol", "update", w["id"], "--workers", "2"))
    assert out.split()[:2] == [w["id"], "awaiting_approval"], out
    assert "needs an admin's approval above 6" in out
    assert w["id"] in [a["id"] for a in hub.call("GET", "/approvals", hub.tokens["ada"]).json()["approvals"]]
    assert ok(cli(hub, "carol", "update", w["id"], "--workers", "1")).split()[:2] == [w["id"], "held"]


def test_a_change_is_tried_first_with_test_only(hub, submitted):  # noqa: F811
    half = ("--kind", "batch", "--gpus", "4", "--time", "1h")
    admitted(hub, submitted, "bob", *half)                 # 4 of the 8 GPUs, for an hour
    w = submit(hub, submitted, "alice", "--kind", "batch", "--gpus", "4", "--workers", "2", "--time", "2h")
    out = ok(cli(hub, "alice", "update", w["id"], "--workers", "1", "--test-only"))
    assert out.startswith(f"{w['id']}  with the change: queue vision, 4, limit 7200 s; #1 in line, starts now "
                          "(now: #1 in line, starts in "), out
    assert out.rstrip().endswith("); nothing changed"), out
    assert _get(hub, "alice", w["id"])["workers"] == 2            # tried, not made
    r = hub.call("PATCH", f"/workloads/{w['id']}?dry_run=true", hub.tokens["alice"], json={"time_limit": 99999})
    assert r.status_code == 429 and "one dry run a second for each caller" in r.json()["message"], r.text
    time.sleep(1.05)                                              # each is a simulation: one a second each
    # A mistyped try is refused as such, and leaves the caller's turn for the next.
    r = hub.call("PATCH", f"/workloads/{w['id']}?dry_run=true", hub.tokens["alice"], json={"resources": {"gpu": 99}})
    assert r.status_code == 400 and "no node in the cluster can hold" in r.json()["message"], r.text
    r = hub.call("PATCH", f"/workloads/{w['id']}?dry_run=true", hub.tokens["alice"], json={"time_limit": 99999})
    assert r.status_code == 200 and r.json()["dry_run"] is True and r.json()["time_limit"] == 99999
    assert r.json()["explanation_before"]["position"] == 1
    for query, words in (("?dry_run=yes", "dry_run must be true or false"),
                         ("?dry_run=true&tasks=all", "dry_run tries a change on one workload")):
        r = hub.call("PATCH", f"/workloads/{w['id']}{query}", hub.tokens["alice"], json={"name": "x"})
        assert r.status_code == 400 and words in r.json()["message"], r.text
    line = one_line_error(cli(hub, "alice", "update", "--array", w["id"], "--name", "x", "--test-only"))
    assert "--test-only tries the change on one workload" in line, line
    assert not hub.call("GET", f"/audit?workload={w['id']}&kind=updated", hub.tokens["ada"]).json()["events"]
