"""Holding waiting work back and letting it go, through the real hub, proxy and service with the
installed CLI: ``submit --hold``, ``hold``, ``release``; an admin's hold only an admin releases."""

from __future__ import annotations

import json

import requests
from test_cli_client import admitted, cli, ok, one_line_error, submitted  # noqa: F401
from test_dependencies_hub import until

SMALL = ("--kind", "batch", "--gpus", "0", "--cpu", "100m")


def test_hold_and_release_by_the_owner_and_by_an_admin(hub, submitted):  # noqa: F811
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--hold", "--json")))
    submitted.append(("alice", w["id"]))
    wid = w["id"]
    assert w["state"] == "held" and w["metadata"]["hold"]["by"] == "alice"
    said = f"held by alice: held at submission; it starts only once released (computehub release {wid})"
    assert w["reason"] == said
    row = next(r for r in ok(cli(hub, "alice", "queue")).splitlines() if r.startswith(wid))
    assert " held " in row and row.endswith(said), row

    assert ok(cli(hub, "alice", "release", wid)).split()[:2] == [wid, "pending"]
    until(hub, "alice", wid, ("admitted",))
    line = one_line_error(cli(hub, "alice", "hold", wid))
    assert f"workload {wid} is admitted; only waiting work" in line, line

    # An admin holds alice's waiting work; she cannot release it, an admin can.
    gpu = ("--kind", "batch", "--gpus", "4", "--workers", "2", "--time", "1h")     # every GPU
    blocker = admitted(hub, submitted, "bob", *gpu)
    waiting = json.loads(ok(cli(hub, "alice", "submit", *gpu, "--json")))
    submitted.append(("alice", waiting["id"]))
    out = ok(cli(hub, "ada", "hold", waiting["id"], "--reason", "node maintenance"))
    assert out.strip() == (f"{waiting['id']}  held  (held by admin ada: node maintenance; it starts only once "
                           "an admin releases it)"), out
    line = one_line_error(cli(hub, "alice", "release", waiting["id"]))
    assert "held by an admin (by admin ada: node maintenance); only an admin releases it" in line, line
    line = one_line_error(cli(hub, "carol", "hold", waiting["id"]))         # not hers: not even there
    assert f"no workload '{waiting['id']}'" in line, line
    assert ok(cli(hub, "ada", "release", waiting["id"])).split()[:2] == [waiting["id"], "pending"]
    w = hub.call("GET", f"/workloads/{waiting['id']}", hub.tokens["alice"]).json()
    assert w["eligible_at"] > w["submitted_at"] and "hold" not in w["metadata"]
    events = hub.call("GET", f"/audit?workload={waiting['id']}", hub.tokens["ada"]).json()["events"]
    assert [(e["kind"], e["data"].get("actor")) for e in events if "held" in e["kind"] or "hold" in e["kind"]] == \
        [("held", "ada"), ("hold_released", "ada")]
    assert blocker


def test_bad_hold_requests_are_refused(hub, submitted):  # noqa: F811
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--hold", "--json")))
    submitted.append(("alice", w["id"]))
    r = hub.call("POST", f"/workloads/{w['id']}/hold", hub.tokens["alice"], json={"why": "x"})
    assert r.status_code == 400 and "unknown field(s): why (it takes reason, until)" in r.json()["message"]
    r = hub.call("POST", f"/workloads/{w['id']}/hold", hub.tokens["alice"], json={"reason": "x" * 501})
    assert r.status_code == 400 and "at most 500 characters" in r.json()["message"]
    r = hub.call("POST", f"/workloads/{w['id']}/hold", hub.tokens["alice"], json={"reason": "ok\x1b]0;pwned\x07"})
    assert r.status_code == 400 and "reason must not contain control characters" in r.json()["message"]
    r = hub.call("POST", f"/workloads/{w['id']}/release", hub.tokens["alice"], json={"now": True})
    assert r.status_code == 400 and "it takes none" in r.json()["message"]
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json={"resources": {"cpu": "100m"}, "hold": "yes"})
    assert r.status_code == 400 and "hold must be true or false" in r.json()["message"]
    line = one_line_error(cli(hub, "alice", "release", "w9999999"))
    assert "no workload 'w9999999'" in line


def test_a_begin_time_holds_work_until_then_and_the_service_lets_it_go_by_itself(hub, submitted):  # noqa: F811
    """``submit --begin`` (Slurm's ``--begin``): held with its begin time, a start estimate no sooner
    than that, then in line with no one releasing it; a bad time is one line and nothing is submitted."""
    import time
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--begin", "3s", "--name", "soon", "--json")))
    submitted.append(("alice", w["id"]))
    begins = w["metadata"]["hold"]["until"]
    assert w["state"] == "held" and 2 < begins - time.time() <= 3.5, w
    assert w["reason"].startswith("held until ") and w["reason"].endswith(
        f" by alice: its begin time; it joins the line then, or once released (computehub release {w['id']})")
    e = hub.call("GET", f"/workloads/{w['id']}", hub.tokens["alice"]).json()["explanation"]
    assert (e["eta"], e["eta_earliest"]) == (begins, True), e
    until(hub, "alice", w["id"], ("admitted",), within=30)
    events = [x["kind"] for x in hub.call("GET", f"/audit?workload={w['id']}", hub.tokens["ada"]).json()["events"]]
    assert events[-2:] == ["hold_released", "admitted"], events

    later = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--begin", "tomorrow", "--json")))
    submitted.append(("alice", later["id"]))
    assert later["state"] == "held" and later["metadata"]["hold"]["until"] - time.time() > 0
    with requests.get(hub.api + "/events", headers={"Authorization": f"token {hub.tokens['alice']}"}, stream=True,
                      timeout=20) as r:            # the event stream (the lab panel): from its begin time
        snap = next(json.loads(line[5:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data:")
                    and line[5:].strip().startswith("["))
    row = next(x for x in snap if x["id"] == later["id"])
    assert (row["eta"], row["eta_earliest"]) == (later["metadata"]["hold"]["until"], True), row
    assert ok(cli(hub, "alice", "release", later["id"])).split()[:2] == [later["id"], "pending"]   # sooner
    before = len(hub.call("GET", "/workloads", hub.tokens["alice"]).json()["workloads"])
    for bad, says in (("soon", "--begin expects a time: 2h or now+90m (from now), 22:00, midnight"),
                      ("25:00", "--begin: '25:00' is not a time of day")):
        line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--begin", bad))
        assert says in line, line
    line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--begin", "2h", "--hold"))
    assert "hold and begin together: give one" in line, line
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json={"kind": "batch", "queue": "vision",
                                                                 "resources": {"gpu": 0, "cpu": "100m"},
                                                                 "begin": "tonight"})
    assert r.status_code == 400 and "begin must be a time (seconds since 1970, UTC)" in r.json()["message"], r.text
    assert len(hub.call("GET", "/workloads", hub.tokens["alice"]).json()["workloads"]) == before


def test_a_hold_until_a_time_ends_by_itself(hub, submitted):  # noqa: F811
    """``hold --until`` (Slurm's ``scontrol update StartTime=``): a hold by hand turned into one that
    ends by itself; for a whole array in one request; a time past or unreadable is one line."""
    import time
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--hold", "--json")))
    submitted.append(("alice", w["id"]))
    out = ok(cli(hub, "alice", "hold", w["id"], "--until", "3s", "--reason", "data lands"))
    assert out.startswith(f"{w['id']}  held  (held until ") and \
        "by alice: data lands; it joins the line then, or once released" in out, out
    until(hub, "alice", w["id"], ("admitted",), within=30)

    arr = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--array", "0-1", "--hold", "--json")))
    submitted.extend(("alice", t) for t in arr["tasks"])
    out = ok(cli(hub, "alice", "hold", "--array", arr["id"], "--until", "2h")).strip()
    assert out == f"array {arr['id']}: held 2 tasks ({arr['tasks'][0]}, {arr['tasks'][1]}): 2 held", out
    ends = {hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["metadata"]["hold"]["until"]
            for t in arr["tasks"]}
    assert len(ends) == 1 and 7100 < ends.pop() - time.time() <= 7200
    line = one_line_error(cli(hub, "alice", "hold", arr["tasks"][0], "--until", "someday"))
    assert "--until expects a time: 2h or now+90m (from now), 22:00" in line, line
    r = hub.call("POST", f"/workloads/{arr['tasks'][0]}/hold", hub.tokens["alice"], json={"until": 5})
    assert r.status_code == 400 and "until (1970-01-01 00:00:05 UTC) has passed" in r.json()["message"], r.text
    r = hub.call("POST", f"/workloads/{arr['id']}/array-action", hub.tokens["alice"],
                 json={"action": "release", "until": time.time() + 60})
    assert r.status_code == 400 and "a release takes no until" in r.json()["message"], r.text


def test_my_own_order_top(hub, submitted):  # noqa: F811
    """``computehub top`` (Slurm's ``scontrol top``): alice's jobs swap places among her own, the
    first named first; another user cannot touch them; running work cannot be reordered."""
    import time
    gpu = ("--kind", "batch", "--gpus", "4", "--workers", "2", "--time", "1h")     # every GPU
    blocker = admitted(hub, submitted, "bob", *gpu)
    mine = []
    for _ in range(3):
        mine.append(json.loads(ok(cli(hub, "alice", "submit", *gpu, "--json")))["id"])
        submitted.append(("alice", mine[-1]))

    def places() -> list[str]:
        deadline = time.time() + 15
        while True:             # positions are the last cycle's: wait for one after the change
            at = {w: hub.call("GET", f"/workloads/{w}", hub.tokens["alice"]).json().get("position") for w in mine}
            if None not in at.values():
                order = sorted(mine, key=at.get)
                if order[0] == mine[2] or time.time() > deadline:
                    return order
            time.sleep(0.2)

    out = ok(cli(hub, "alice", "top", mine[2], mine[1])).splitlines()
    assert out == [f"{mine[2]}  pending  first among your preemptible work in queue vision",
                   f"{mine[1]}  pending  first among your preemptible work in queue vision"], out
    assert places() == [mine[2], mine[1], mine[0]]
    line = one_line_error(cli(hub, "carol", "top", mine[0]))
    assert f"no workload '{mine[0]}'" in line, line
    line = one_line_error(cli(hub, "bob", "top", blocker["id"]))
    assert "is admitted; only waiting work can go first among its owner's" in line, line
    events = hub.call("GET", f"/audit?workload={mine[2]}&kind=topped", hub.tokens["ada"]).json()["events"]
    assert [e["data"]["actor"] for e in events] == ["alice"], events

    # A whole array's waiting tasks, in index order, in one request.
    sweep = json.loads(ok(cli(hub, "alice", "submit", *gpu, "--array", "0-1", "--json")))
    submitted.extend(("alice", t) for t in sweep["tasks"])
    out = ok(cli(hub, "alice", "top", "--array", sweep["id"])).strip()
    assert out == f"array {sweep['id']}: put first 2 tasks ({sweep['tasks'][0]}, {sweep['tasks'][1]}): 2 pending", out
    everything = [*mine, *sweep["tasks"]]
    deadline = time.time() + 15
    while True:             # positions are the last cycle's: wait for one after the change
        at = {w: hub.call("GET", f"/workloads/{w}", hub.tokens["alice"]).json().get("position") for w in everything}
        if None not in at.values() and sorted(everything, key=at.get)[:2] == sweep["tasks"]:
            break
        assert time.time() < deadline, at
        time.sleep(0.2)
