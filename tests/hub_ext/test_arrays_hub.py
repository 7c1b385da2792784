"""Job arrays through the real hub, proxy and service with the installed CLI: ``submit --array``,
the cap in ``queue``, ``jobs --array`` (ended tasks too, from the database), ``hold``/``release``/
``cancel --array``, and the refusals. (Tasks run in tests/spawner: local and Kubernetes launchers.)"""

from __future__ import annotations

import json
from unittest.mock import ANY

from test_cli_client import cli, ok, one_line_error, submitted  # noqa: F401
from test_dependencies_hub import until

SMALL = ("--kind", "batch", "--gpus", "0", "--cpu", "100m")


def test_an_array_is_submitted_capped_listed_held_and_cancelled_as_one(hub, submitted):  # noqa: F811
    out = ok(cli(hub, "alice", "submit", *SMALL, "--array", "0-3%2", "--name", "sweep"))
    first_line, task_line = out.splitlines()[:2]
    first = task_line.split()[0]
    ids = [f"w{int(first[1:]) + i:07d}" for i in range(4)]
    submitted.extend(("alice", wid) for wid in ids)
    assert first_line == f"array {first}: 4 tasks ({ids[0]}..{ids[3]}), at most 2 at a time", out
    assert " GPUs each, priority preemptible" in task_line and f"computehub cancel --array {first}" in out

    for wid in ids[:2]:
        until(hub, "alice", wid, ("admitted",))
    w = hub.call("GET", f"/workloads/{ids[3]}", hub.tokens["alice"]).json()
    assert (w["state"], w["array"]) == ("pending", {"id": first, "index": 3, "size": 4, "limit": 2})
    said = f"array {first} runs at most 2 tasks at a time and 2 are running; it starts when one of them ends"
    assert w["explanation"]["reason"] == said
    # The waiting tasks are one row (squeue's way), the running ones one each; --json has each.
    rows = {r.split()[0]: r for r in ok(cli(hub, "alice", "queue")).splitlines()[1:]}
    assert set(rows) >= {ids[0], ids[1], ids[2]} and ids[3] not in rows, rows
    assert f"sweep {first}[2-3]" in rows[ids[2]] and rows[ids[2]].endswith(said), rows[ids[2]]
    assert f"sweep {first}[0]" in rows[ids[0]] and " admitted " in rows[ids[0]], rows[ids[0]]
    listed = json.loads(ok(cli(hub, "alice", "queue", "--json")))["workloads"]
    assert {w["id"] for w in listed} >= set(ids)
    rows = {r.split()[0]: r for r in ok(cli(hub, "alice", "jobs")).splitlines()[1:]}
    assert f"sweep {first}[2-3]" in rows[ids[2]] and ids[3] not in rows, rows

    listing = ok(cli(hub, "alice", "jobs", "--array", first))
    assert listing.splitlines()[-1] == f"array {first}: 4 tasks: 2 admitted, 2 pending", listing

    held = ok(cli(hub, "alice", "hold", "--array", ids[3], "--reason", "later"))     # any task names it
    assert held.strip() == f"array {first}: held 2 tasks ({ids[2]}, {ids[3]}): 2 held", held
    assert hub.call("GET", f"/workloads/{ids[2]}", hub.tokens["alice"]).json()["metadata"]["hold"]["reason"] == "later"
    line = one_line_error(cli(hub, "alice", "hold", "--array", first))
    assert f"job array {first} has no tasks waiting and not held already (4 live: 2 admitted, 2 held)" in line, line
    released = ok(cli(hub, "alice", "release", "--array", str(int(first[1:]))))      # 50 for w0000050
    assert released.strip() == f"array {first}: released 2 tasks ({ids[2]}, {ids[3]}): 2 pending", released

    line = one_line_error(cli(hub, "carol", "jobs", "--array", first))     # not hers to see
    assert f"{first} names no job array you may see" in line, line
    line = one_line_error(cli(hub, "carol", "cancel", "--array", first))
    assert f"no job array '{first}' you may see" in line, line

    cancelled = ok(cli(hub, "alice", "cancel", "--array", first)).strip()
    assert cancelled.startswith(f"array {first}: cancelled 4 tasks ({ids[0]}..{ids[3]}): "), cancelled
    for wid in ids:
        until(hub, "alice", wid, ("cancelled",))
    listing = ok(cli(hub, "alice", "jobs", "--array", first))       # ended tasks: read from the database
    assert listing.splitlines()[-1] == f"array {first}: 4 tasks: 4 cancelled", listing
    answer = hub.call("GET", f"/workloads?array={first}&state=cancelled", hub.tokens["ada"]).json()
    assert [w["array"]["index"] for w in answer["workloads"]] == [0, 1, 2, 3] and answer["total"] == 4
    events = hub.call("GET", f"/audit?workload={ids[1]}", hub.tokens["ada"]).json()["events"]
    assert events[0]["kind"] == "submitted" and events[0]["data"]["array"]["index"] == 1


def test_the_api_answers_with_every_task_and_refuses_a_bad_array_whole(hub, submitted):  # noqa: F811
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--array", "1,5-9:4", "--json")))
    submitted.extend(("alice", wid) for wid in w["tasks"])
    assert [t["array"]["index"] for t in (hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()
                                          for wid in w["tasks"])] == [1, 5, 9]
    assert w["id"] == w["tasks"][0] and w["array"] == {"id": w["id"], "index": 1, "size": 3, "limit": 0}
    # Work after the whole array: held for every task; a cancelled task means it never runs.
    after = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--after", f"{w['id']}[]", "--json")))
    submitted.append(("alice", after["id"]))
    assert after["state"] == "held" and after["after"] == [f"{t}:ok" for t in w["tasks"]], after
    # ... or task by task (:corr): each waits for the task of the same index only.
    paired = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--array", "5,9", "--after", f"{w['id']}[]:corr",
                               "--json")))
    submitted.extend(("alice", t) for t in paired["tasks"])
    assert [hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["after"] for t in paired["tasks"]] == [
        [f"{w['tasks'][1]}:ok"], [f"{w['tasks'][2]}:ok"]]
    line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--array", "0-1", "--after", f"{w['id']}[]:corr"))
    assert f"array {w['id']} has no task 0, which task 0 of this one would run after" in line, line
    ok(cli(hub, "alice", "cancel", "--array", w["id"]))
    gone = until(hub, "alice", after["id"], ("cancelled",))
    assert gone["reason"].endswith("cancelled by alice, and this was to run after it finishes"), gone

    before = hub.call("GET", "/workloads?user=alice&limit=1000", hub.tokens["alice"]).json()["total"]
    line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--array", "0-x"))
    assert "array: '0-x' is not an index or a range; write indexes like 0-9" in line, line
    line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--array", "0-1000"))
    assert "more than 1000 tasks; split the work into several arrays" in line, line
    line = one_line_error(cli(hub, "alice", "infer", "--gpus", "0", "--cpu", "100m", "--array", "0-1", "--", "x"))
    assert "only batch and training work comes in arrays, not inference" in line, line
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json={"resources": {"cpu": "100m"}, "array": [0, 1]})
    assert r.status_code == 400 and "array must be task indexes like 0-9" in r.json()["message"]
    r = hub.call("POST", "/workloads", hub.tokens["alice"],
                 json={"resources": {"cpu": "100m"}, "array": "0-1", "kind": "notebook"})
    assert r.status_code == 400 and "not notebook" in r.json()["message"]
    after = hub.call("GET", "/workloads?user=alice&limit=1000", hub.tokens["alice"]).json()["total"]
    assert after == before                                           # nothing of the refused ones
    line = one_line_error(cli(hub, "alice", "cancel", "--array", "w9999999"))
    assert "no job array 'w9999999' you may see" in line, line
    line = one_line_error(cli(hub, "alice", "cancel", "--array", gone["id"]))
    assert f"workload {gone['id']} is not a task of a job array" in line, line
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["alice"], json={"action": "stop"})
    assert r.status_code == 400 and "action is required, one of cancel, hold" in r.json()["message"]
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["alice"],
                 json={"action": "cancel", "reason": "x"})
    assert r.status_code == 400 and "a cancel takes no reason" in r.json()["message"]
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["alice"], json={"action": "approve"})
    assert r.status_code == 403 and "custom:computehub:admin" in r.json()["message"]


def test_an_admin_approves_or_rejects_an_arrays_tasks_at_once(hub, submitted):  # noqa: F811
    big = ("--gpus", "4", "--workers", "2", "--time", "1h")       # above vision's approval threshold for carol
    w = json.loads(ok(cli(hub, "carol", "submit", *big, "--array", "0-2", "--name", "big", "--json")))
    submitted.extend(("carol", t) for t in w["tasks"])
    assert w["state"] == "awaiting_approval"
    listing = ok(cli(hub, "ada", "approvals"))
    rows = [r for r in listing.splitlines() if f"{w['id']}[" in r]
    assert len(rows) == 1 and rows[0].endswith(f"big {w['id']}[0-2]"), listing      # one row for the three
    line = one_line_error(cli(hub, "ada", "reject", "--array", w["id"]))
    assert "--reason" in line
    out = ok(cli(hub, "ada", "reject", "--array", w["id"], "--reason", "one at a time, please")).strip()
    assert out == f"array {w['id']}: rejected 3 tasks ({', '.join(w['tasks'])}): 3 rejected", out
    assert {hub.call("GET", f"/workloads/{t}", hub.tokens["carol"]).json()["reason"]
            for t in w["tasks"]} == {"one at a time, please"}
    line = one_line_error(cli(hub, "ada", "approve", "--array", w["id"]))        # nothing left to decide
    assert f"no job array {w['id']!r} with tasks waiting or running" in line, line


def test_an_arrays_limit_changes_while_it_runs(hub, submitted):  # noqa: F811
    out = ok(cli(hub, "alice", "submit", *SMALL, "--array", "0-4%1"))
    first = out.splitlines()[1].split()[0]
    ids = [f"w{int(first[1:]) + i:07d}" for i in range(5)]
    submitted.extend(("alice", wid) for wid in ids)
    until(hub, "alice", ids[0], ("admitted",))
    said = ok(cli(hub, "alice", "array-limit", ids[3], "3"))         # any task names its array
    assert said.strip() == f"array {first}: at most 3 at a time (5 tasks waiting or running)", said
    for wid in ids[:3]:
        until(hub, "alice", wid, ("admitted",))
    w = hub.call("GET", f"/workloads/{ids[4]}", hub.tokens["alice"]).json()
    assert (w["state"], w["array"]["limit"]) == ("pending", 3)
    assert "at most 3 tasks at a time and 3 are running" in w["explanation"]["reason"]
    assert ok(cli(hub, "alice", "array-limit", first, "0")).strip().startswith(f"array {first}: no limit")
    until(hub, "alice", ids[4], ("admitted",))
    events = hub.call("GET", f"/audit?workload={ids[0]}", hub.tokens["ada"]).json()["events"]
    assert [(e["reason"], e["data"]["actor"]) for e in events if e["kind"] == "array_limit"] == [
        ("at most 3 at a time", "alice"), ("no limit", "alice")]

    line = one_line_error(cli(hub, "alice", "array-limit", first, "many"))
    assert "the limit is a whole number of tasks (0: no limit), not 'many'" in line, line
    line = one_line_error(cli(hub, "carol", "array-limit", first, "2"))          # not hers
    assert f"no job array '{first}' you may see" in line, line
    r = hub.call("POST", f"/workloads/{first}/array-limit", hub.tokens["alice"], json={"limit": 5000})
    assert r.status_code == 400 and "limit must be a whole number of tasks from 0" in r.json()["message"]
    r = hub.call("POST", f"/workloads/{first}/array-limit", hub.tokens["alice"], json={})
    assert r.status_code == 400 and "limit is required" in r.json()["message"]
    alone = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--json")))
    submitted.append(("alice", alone["id"]))
    line = one_line_error(cli(hub, "alice", "array-limit", alone["id"], "2"))
    assert f"workload {alone['id']} is not a task of a job array" in line, line
    ok(cli(hub, "alice", "cancel", "--array", first))
    line = one_line_error(cli(hub, "alice", "array-limit", first, "2"))
    assert f"no job array '{first}' with tasks waiting or running" in line, line


def test_a_task_is_named_by_its_array_and_index(hub, submitted):  # noqa: F811
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--array", "3,7", "--hold", "--json")))
    submitted.extend(("alice", t) for t in w["tasks"])
    first = w["id"]
    out = ok(cli(hub, "alice", "release", f"{first}[7]"))                 # Slurm's 1234_7
    assert out.split()[:2] == [w["tasks"][1], "pending"], out
    short = f"w{int(first[1:])}[3]"                                        # w and digits, as ids go
    out = ok(cli(hub, "alice", "cancel", short, f"{first}[7]"))
    assert [line.split()[0] for line in out.splitlines()] == w["tasks"], out
    other = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--hold", "--json")))["id"]
    submitted.append(("alice", other))
    r = cli(hub, "alice", "cancel", f"{first}[5]", other)
    assert r.returncode == 2 and f"{first}[5]: no task 5 of a job array {first} you may see" in r.stderr, r
    assert r.stdout.split()[:2] == [other, "cancelled"]                     # the others still go ahead
    line = one_line_error(cli(hub, "alice", "logs", f"{first}[9]"))
    assert f"no task 9 of a job array {first}" in line, line
    line = one_line_error(cli(hub, "carol", "logs", f"{first}[3]"))        # not hers: as if none
    assert f"no task 3 of a job array {first} you may see" in line, line
    r = cli(hub, "alice", "logs", f"{first}[3]")
    assert r.returncode == 0 and "no output yet" in r.stderr, r             # it never ran: resolved, no log


def test_an_arrays_tasks_an_admin_holds_are_left_held_and_said_apart(hub, submitted):  # noqa: F811
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--array", "0-3%1", "--hold", "--json")))
    submitted.extend(("alice", t) for t in w["tasks"])
    ok(cli(hub, "ada", "hold", w["tasks"][1], "--reason", "disk check"))        # an admin's hold over hers
    r = cli(hub, "alice", "release", "--array", w["id"])
    assert r.returncode == 2, r                                                  # not all she asked for
    assert r.stdout.strip() == (f"array {w['id']}: released 3 tasks ({w['tasks'][0]}, {w['tasks'][2]}, "
                                f"{w['tasks'][3]}): 3 pending"), r.stdout
    assert r.stderr.strip() == (f"computehub: error: {w['tasks'][1]} left as it was: workload {w['tasks'][1]} is "
                                "held by an admin (by admin ada: disk check); only an admin releases it"), r.stderr
    states = [hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["state"] for t in w["tasks"]]
    assert [s == "held" for s in states] == [False, True, False, False], states
    held = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["alice"], json={"action": "hold"}).json()
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["alice"], json={"action": "release"})
    assert r.status_code == 200 and r.json()["tasks"] == held["tasks"], (r.text, held)
    assert r.json()["refused"] == {w["tasks"][1]: ANY}
    ok(cli(hub, "ada", "release", w["tasks"][1]))
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["ada"], json={"action": "hold"})
    assert r.status_code == 200 and set(r.json()["states"].values()) == {"held"}, r.text
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["alice"], json={"action": "release"})
    assert r.status_code == 403 and "only an admin releases it" in r.json()["message"], r.text
    r = hub.call("POST", f"/workloads/{w['id']}/array-action", hub.tokens["ada"], json={"action": "release"})
    assert r.status_code == 200 and "held" not in r.json()["states"].values(), r.text


def test_a_big_arrays_tasks_are_estimated_by_one_plan_of_the_line_for_the_stream(hub, submitted):  # noqa: F811
    """A start estimate of its own simulates everything ahead: the snapshot (event stream, landing
    page) answers the tasks of a big array from one plan of the whole line instead, each with its
    own start estimate, at the cost of at most one estimate of its own."""
    import requests
    from test_metrics_waiting import scrape, value
    big = ("--gpus", "4", "--workers", "2", "--queue", "vision", "--time", "1h")     # more than vision may run
    w = json.loads(ok(cli(hub, "alice", "submit", *big, "--array", "0-5", "--json")))
    submitted.extend(("alice", t) for t in w["tasks"])
    for t in w["tasks"][1:]:
        until(hub, "alice", t, ("pending",))

    def made():
        m = scrape(hub, hub.tokens["ada"])
        return (value(m, "computehub_start_estimate_duration_seconds_count") or 0,
                value(m, "computehub_line_plan_duration_seconds_count") or 0)

    own0, plans0 = made()
    with requests.get(hub.api + "/events", headers={"Authorization": f"token {hub.tokens['alice']}"}, stream=True,
                      timeout=20) as r:
        snap = next(json.loads(line[5:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data:")
                    and line[5:].strip().startswith("["))
    own, plans = made()
    tasks = {x["id"]: x for x in snap if x["id"] in w["tasks"]}
    waiting = [tasks[t] for t in w["tasks"] if tasks[t]["state"] == "pending"]
    assert len(waiting) >= 5, tasks
    for x, after in zip(waiting, waiting[1:]):
        assert after["position"] > x["position"] and after["reason"], after
    for x in waiting:
        assert x["eta_reason"] != "not estimated for work this far down the line" and x["eta_seconds"] is not None, x
    assert own - own0 <= 1 and plans - plans0 <= 1, (own0, own, plans0, plans)


def test_a_listing_explains_each_waiting_workload_of_its_page_in_one_request(hub, submitted):  # noqa: F811
    """``GET workloads?explain=true`` (what computehub queue, %jobs and the lab panel ask): each
    waiting workload of the page with its explanation, as GET workloads/{id} gives it."""
    big = ("--gpus", "4", "--workers", "2", "--queue", "vision", "--time", "1h")     # more than vision may run
    w = json.loads(ok(cli(hub, "alice", "submit", *big, "--array", "0-3", "--json")))
    submitted.extend(("alice", t) for t in w["tasks"])
    for t in w["tasks"][1:]:                   # the first may run, when nothing else does
        until(hub, "alice", t, ("pending",))
    r = hub.call("GET", f"/workloads?array={w['id']}&explain=true", hub.tokens["alice"])
    assert r.status_code == 200, r.text
    listed = {x["id"]: x for x in r.json()["workloads"]}
    assert set(listed) == set(w["tasks"])
    waiting = [t for t in w["tasks"] if listed[t]["state"] == "pending"]
    assert len(waiting) >= 3 and all("explanation" not in listed[t] for t in w["tasks"] if t not in waiting)
    for t in waiting:
        e, one = listed[t]["explanation"], hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()
        assert e["reason"] == one["explanation"]["reason"] and e["position"] == one["explanation"]["position"], e
        assert e["eta_reason"] and set(one["explanation"]) <= set(e) | {"id", "state", "queue", "priority"}, e
    plain = hub.call("GET", f"/workloads?array={w['id']}", hub.tokens["alice"]).json()["workloads"]
    assert not any("explanation" in x for x in plain)
    # A page with ended states is read from the database: its waiting ones are explained all the same,
    # one new in line (no plan has it: its own estimate) included.
    fresh = json.loads(ok(cli(hub, "alice", "submit", *big, "--json")))
    submitted.append(("alice", fresh["id"]))
    r = hub.call("GET", f"/workloads?array={w['id']}&state=pending&state=finished&explain=true", hub.tokens["alice"])
    assert r.status_code == 200 and all(x["explanation"]["reason"] for x in r.json()["workloads"]), r.text
    r = hub.call("GET", "/workloads?user=alice&state=pending&state=cancelled&explain=true", hub.tokens["alice"])
    assert r.status_code == 200, r.text
    mine = {x["id"]: x for x in r.json()["workloads"]}
    assert mine[fresh["id"]]["explanation"]["reason"], mine[fresh["id"]]
    r = hub.call("GET", "/workloads?explain=yes", hub.tokens["alice"])
    assert r.status_code == 400 and "explain must be true or false" in r.json()["message"], r.text


def test_state_picks_which_of_an_arrays_tasks_are_changed_or_cancelled(hub, submitted):  # noqa: F811
    """``--state`` (Slurm's ``scancel --state``): cancel an array's tasks in line and let its running
    ones go on; change its held tasks only. The installed CLI through the real hub and proxy."""
    w = json.loads(ok(cli(hub, "alice", "submit", *SMALL, "--array", "0-3%1", "--name", "sweep", "--json")))
    ids = w["tasks"]
    submitted.extend(("alice", t) for t in ids)
    until(hub, "alice", ids[0], ("admitted", "running"))
    ok(cli(hub, "alice", "hold", ids[3], "--reason", "later"))

    out = ok(cli(hub, "alice", "update", "--array", w["id"], "--state", "held", "--name", "sweep-late")).strip()
    assert out.startswith(f"{ids[3]}  held ") and f"(1 waiting task of array {w['id']})" in out, out
    names = {t: hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["name"] for t in ids}
    assert names == {ids[0]: "sweep", ids[1]: "sweep", ids[2]: "sweep", ids[3]: "sweep-late"}, names

    out = ok(cli(hub, "alice", "cancel", "--array", w["id"], "--state", "pending")).strip()
    assert out == f"array {w['id']}: cancelled 2 tasks ({ids[1]}, {ids[2]}): 2 cancelled", out
    states = [hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["state"] for t in ids]
    assert states[1:] == ["cancelled", "cancelled", "held"] and states[0] in ("admitted", "running"), states

    # Nothing left in that state, a state it may not pick, --state without --array: one line, exit 2,
    # and nothing touched.
    line = one_line_error(cli(hub, "alice", "cancel", "--array", w["id"], "--state", "pending"))
    assert (f"job array {w['id']} has no tasks still live and not being stopped already among those pending "
            "(2 live: ") in line, line
    line = one_line_error(cli(hub, "alice", "update", "--array", w["id"], "--state", "pending", "--time", "1h"))
    assert f"no task of job array {w['id']} is waiting (pending)" in line, line
    line = one_line_error(cli(hub, "alice", "update", "--array", w["id"], "--state", "running", "--time", "1h"))
    assert "--state: 'running' is not a state it may pick; one or more of held, pending, awaiting_approval" in line
    line = one_line_error(cli(hub, "alice", "cancel", ids[3], "--state", "held"))
    assert "--state picks tasks of job arrays: give --array too" in line, line
    states = [hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["state"] for t in (ids[0], ids[3])]
    assert states[1] == "held" and states[0] in ("admitted", "running"), states
