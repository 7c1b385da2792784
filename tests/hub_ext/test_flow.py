"""A user's path through the real hub and proxy: log in, get a token, submit, list,
watch the event stream, cancel; plus admin changes, the audit log and metrics."""

import json
import threading
import time

import requests


def _login(hub, user):
    s = requests.Session()
    s.get(hub.url + "/hub/login", timeout=10)
    r = s.post(hub.url + "/hub/login", data={"username": user, "password": "pw", "_xsrf": s.cookies.get("_xsrf")},
               timeout=10, allow_redirects=False)
    assert r.status_code == 302, r.text
    return s


def _events(hub, token, until, timeout=20.0):
    """Read the SSE stream until ``until(snapshot)`` is true; returns all snapshots seen."""
    seen = []
    with requests.get(hub.api + "/events", headers={"Authorization": f"token {token}"}, stream=True,
                      timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        deadline = time.time() + timeout
        event = None
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "workloads":
                snap = json.loads(line[5:])
                seen.append(snap)
                if until(snap):
                    break
            if time.time() > deadline:
                raise AssertionError(f"stream did not reach the expected state; saw {seen[-3:]}")
    return seen


def test_login_token_submit_list_watch_cancel(hub):
    s = _login(hub, "bob")
    tok = s.post(hub.url + "/hub/api/users/bob/tokens", json={"note": "flow"},
                 headers={"X-XSRFToken": s.cookies.get("_xsrf")}, timeout=10).json()["token"]
    # Fill vision's guarantee (4 GPUs on gpu-a/gpu-b) so that the next one waits.
    first = hub.call("POST", "/workloads", tok, json={"name": "big", "kind": "training",
                                                      "resources": {"gpu": 4}, "time_limit": 3600})
    assert first.status_code == 201, first.text
    big = first.json()
    assert big["user"] == "bob" and big["queue"] == "vision" and first.headers["Location"].endswith(big["id"])
    _events(hub, tok, lambda snap: any(w["id"] == big["id"] and w["state"] == "admitted" for w in snap))
    waiter = hub.call("POST", "/workloads", tok, json={"name": "waits", "kind": "notebook", "resources": {"gpu": 1}})
    assert waiter.status_code == 201, waiter.text
    wid = waiter.json()["id"]

    snaps = _events(hub, tok, lambda snap: any(w["id"] == big["id"] and w["state"] == "admitted" for w in snap)
                    and any(w["id"] == wid and "guaranteed" in (w.get("reason") or "") for w in snap))
    mine = {w["id"]: w for w in snaps[-1]}
    assert mine[big["id"]]["state"] in ("admitted", "running")
    assert mine[wid]["state"] == "pending" and mine[wid]["position"] >= 1
    assert "guaranteed" in mine[wid]["reason"]          # interactive work runs inside vision's 4 GPUs

    listed = hub.call("GET", "/workloads", tok).json()
    ids = [w["id"] for w in listed["workloads"]]
    assert big["id"] in ids and wid in ids and all(w["user"] == "bob" for w in listed["workloads"])
    detail = hub.call("GET", f"/workloads/{wid}", tok).json()
    assert detail["explanation"]["position_in_queue"] >= 1 and detail["explanation"]["reason"]

    # Watch the cancel arrive on the stream.
    got = {}

    def watch():
        got["snaps"] = _events(hub, tok, lambda snap: all(w["id"] != big["id"] for w in snap))

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.5)
    r = hub.call("DELETE", f"/workloads/{big['id']}", tok)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    t.join(25)
    assert got.get("snaps"), "the stream never showed the cancel"
    # Its GPUs went back: the waiting notebook starts now.
    deadline = time.time() + 10
    while time.time() < deadline and hub.call("GET", f"/workloads/{wid}", tok).json()["state"] == "pending":
        time.sleep(0.2)
    assert hub.call("GET", f"/workloads/{wid}", tok).json()["state"] == "admitted"
    assert hub.call("DELETE", f"/workloads/{wid}", tok).status_code == 200
    assert hub.call("DELETE", f"/workloads/{wid}", tok).status_code == 409


def test_admin_changes_are_audited_with_before_and_after(hub):
    ada = hub.tokens["ada"]
    before = hub.call("GET", "/queues/nlp", ada).json()
    r = hub.call("PATCH", "/queues/nlp", ada, json={"weight": 2.5})
    assert r.status_code == 200 and r.json()["weight"] == 2.5
    events = hub.call("GET", "/audit?kind=queue_updated", ada).json()["events"]
    last = events[-1]
    assert last["data"]["actor"] == "ada" and last["data"]["queue"] == "nlp"
    assert last["data"]["before"]["weight"] == before["weight"] and last["data"]["after"]["weight"] == 2.5
    assert hub.call("PATCH", "/queues/nlp", ada, json={"weight": before["weight"]}).status_code == 200
    bad = hub.call("PATCH", "/queues/nlp", ada, json={"limit": {"gpu": 1}, "guaranteed": {"gpu": 4}})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid" and "below its" in bad.json()["message"]


def test_approval_flow(hub):
    carol, ada = hub.tokens["carol"], hub.tokens["ada"]
    r = hub.call("POST", "/workloads", carol, json={"kind": "training", "resources": {"gpu": 8}, "workers": 1,
                                                    "time_limit": 60})
    assert r.status_code == 400         # no node holds 8 GPUs: refused before anything is written
    r = hub.call("POST", "/workloads", carol, json={"kind": "training", "resources": {"gpu": 4}, "workers": 2})
    assert r.status_code == 201 and r.json()["state"] == "awaiting_approval"
    wid = r.json()["id"]
    assert wid in [w["id"] for w in hub.call("GET", "/approvals", ada).json()["approvals"]]
    assert hub.call("GET", "/approvals", carol).status_code == 403
    d = hub.call("POST", f"/approvals/{wid}", ada, json={"approve": False, "reason": "book a slot first"})
    assert d.status_code == 200 and d.json()["state"] == "rejected"
    assert hub.call("GET", f"/workloads/{wid}", carol).json()["reason"] == "book a slot first"


def test_metrics_need_a_scope_and_describe_the_scheduler(hub):
    assert requests.get(hub.service_url + "/metrics", timeout=10).status_code == 401
    assert requests.get(hub.service_url + "/metrics", headers={"Authorization": f"token {hub.tokens['alice']}"},
                        timeout=10).status_code == 403
    r = requests.get(hub.service_url + "/metrics", headers={"Authorization": f"token {hub.tokens['ada']}"},
                     timeout=10)
    assert r.status_code == 200
    text = r.text
    # Labelled series appear once something was counted under a label; their type lines always
    # do, so the test does not depend on which tests ran before it.
    for name in ("computehub_gpus_total", "computehub_gpus_allocated", "computehub_workloads",
                 "computehub_scheduling_cycle_duration_seconds_count"):
        assert name in text, name
    for name, kind in (("computehub_queue_wait_seconds", "histogram"), ("computehub_preemptions_total", "counter"),
                       ("computehub_preempted_work_lost_gpu_seconds_total", "counter")):
        assert f"# TYPE {name} {kind}" in text, name
    assert 'computehub_gpus_total{flavor="a100"} 8.0' in text


def test_hub_home_page_links_computehub_and_its_admin_pages_for_admins(hub):
    pages = {}
    for user in ("ada", "alice"):
        s = _login(hub, user)
        r = s.get(hub.url + "/hub/home", timeout=10)
        assert r.status_code == 200
        pages[user] = r.text
    assert 'id="computehub-card"' in pages["alice"] and "/services/computehub/" in pages["alice"]
    assert 'id="computehub-admin-link"' in pages["ada"]
    assert 'id="computehub-admin-link"' not in pages["alice"]


def test_work_submitted_on_behalf_goes_to_a_queue_of_the_users_groups(hub):
    """The launcher names only the user; the service asks the hub for that user's groups."""
    r = hub.call("POST", "/workloads", hub.launcher_token, json={"user": "carol", "kind": "batch",
                                                                 "resources": {"cpu": "100m"}})
    assert r.status_code == 201, r.text
    assert r.json()["user"] == "carol" and r.json()["queue"] == "nlp"
    # ada is in no group: her work goes to a queue open to everyone, and without one it has no place.
    for_ada = {"user": "ada", "kind": "batch", "resources": {"cpu": "100m"}}
    assert hub.call("PUT", "/queues/flow-open", hub.tokens["ada"], json={"parent": "org"}).status_code == 201
    try:
        r2 = hub.call("POST", "/workloads", hub.launcher_token, json=for_ada)
        assert r2.status_code == 201, r2.text
        assert hub.call("GET", f"/queues/{r2.json()['queue']}", hub.tokens["ada"]).json()["groups"] == []
        assert hub.call("DELETE", f"/workloads/{r2.json()['id']}", hub.launcher_token).status_code == 200
    finally:
        hub.call("DELETE", "/queues/flow-open", hub.tokens["ada"])
    open_leaves = [q for q in hub.call("GET", "/queues", hub.tokens["ada"]).json()["queues"]
                   if q["leaf"] and not q["groups"] and q["name"] != "org"]
    r2 = hub.call("POST", "/workloads", hub.launcher_token, json=for_ada)
    if open_leaves:        # another module's open queue, still there
        assert r2.status_code == 201 and r2.json()["queue"] in {q["name"] for q in open_leaves}, r2.text
        hub.call("DELETE", f"/workloads/{r2.json()['id']}", hub.launcher_token)
    else:
        assert r2.status_code == 400 and "ada's groups" in r2.json()["message"], r2.text
    r3 = hub.call("POST", "/workloads", hub.launcher_token, json={"user": "nobody-such", "kind": "batch"})
    assert r3.status_code == 400 and "no user" in r3.json()["message"]
    for bad in ([], "", 7):     # found by the fuzzer: a list here was a 500
        r4 = hub.call("POST", "/workloads", hub.launcher_token, json={"user": bad, "resources": {"cpu": "100m"}})
        assert r4.status_code == 400 and "user must be a user name" in r4.json()["message"], (bad, r4.text)
    assert hub.call("DELETE", f"/workloads/{r.json()['id']}", hub.launcher_token).status_code == 200


def test_long_poll_answers_when_the_state_changes(hub):
    """GET workloads/{id}?wait=S holds the answer until the state leaves what the caller saw."""
    tok = hub.tokens["bob"]
    big = hub.call("POST", "/workloads", tok, json={"name": "lp-big", "kind": "training",
                                                    "resources": {"gpu": 4}, "time_limit": 3600}).json()
    _events(hub, tok, lambda snap: any(w["id"] == big["id"] and w["state"] == "admitted" for w in snap))
    wid = hub.call("POST", "/workloads", tok, json={"name": "lp-waits", "kind": "notebook",
                                                    "resources": {"gpu": 1}}).json()["id"]
    try:
        # Nothing changes: the answer comes after the wait, still pending.
        t0 = time.monotonic()
        r = hub.call("GET", f"/workloads/{wid}?wait=1.5", tok)
        assert r.status_code == 200 and r.json()["state"] == "pending"
        assert 1.4 <= time.monotonic() - t0 < 10
        # A state the caller did not see yet answers at once.
        t0 = time.monotonic()
        assert hub.call("GET", f"/workloads/{wid}?wait=20&state=admitted", tok).json()["state"] == "pending"
        assert time.monotonic() - t0 < 5
        # The GPUs free up during the wait: the answer comes with the admission, not at the deadline.
        got = {}

        def poll():
            t = time.monotonic()
            got["w"] = hub.call("GET", f"/workloads/{wid}?wait=25&state=pending", tok).json()
            got["s"] = time.monotonic() - t

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(1.0)
        assert "w" not in got, "the long poll answered before anything changed"
        assert hub.call("DELETE", f"/workloads/{big['id']}", tok).status_code == 200
        th.join(30)
        assert got["w"]["state"] == "admitted" and 1.0 <= got["s"] < 15, got
        for bad, word in (("wait=-1", "between 0 and 30"), ("wait=31", "between 0 and 30"),
                          ("wait=soon", "a number"), ("wait=1&state=asleep", "one of")):
            r = hub.call("GET", f"/workloads/{wid}?{bad}", tok)
            assert r.status_code == 400 and word in r.json()["message"], (bad, r.text)
    finally:
        hub.call("DELETE", f"/workloads/{big['id']}", tok)
        hub.call("DELETE", f"/workloads/{wid}", tok)


def test_a_lost_node_requeues_by_class(hub):
    """A launcher reporting failed with node_lost: training requeues (same id, back in line),
    a notebook (its class does not requeue) ends failed; bad values are refused."""
    tok = hub.launcher_token

    def admitted(kind):
        w = hub.call("POST", "/workloads", tok, json={"user": "carol", "kind": kind,
                                                      "resources": {"cpu": "100m"}}).json()
        deadline = time.time() + 10
        while hub.call("GET", f"/workloads/{w['id']}", tok).json()["state"] != "admitted":
            assert time.time() < deadline, "not admitted"
            time.sleep(0.1)
        assert hub.call("POST", f"/workloads/{w['id']}/status", tok, json={"state": "running"}).status_code == 200
        return w["id"]

    job, nb = admitted("training"), admitted("notebook")
    for body, word in (({"state": "failed", "node_lost": "yes"}, "true or false"),
                       ({"state": "finished", "node_lost": True}, "goes with state failed")):
        r = hub.call("POST", f"/workloads/{job}/status", tok, json=body)
        assert r.status_code == 400 and word in r.json()["message"], r.text
    assert hub.call("GET", f"/workloads/{job}", tok).json()["state"] == "running"     # nothing changed
    r = hub.call("POST", f"/workloads/{job}/status", tok, json={"state": "failed", "exit_code": 1,
                                                                "node_lost": True, "reason": "node n1 lost"})
    assert r.status_code == 200 and r.json()["state"] in ("pending", "admitted"), r.text
    r = hub.call("POST", f"/workloads/{nb}/status", tok, json={"state": "failed", "exit_code": 1,
                                                               "node_lost": True, "reason": "node n1 lost"})
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text
    kinds = [e["kind"] for e in hub.call("GET", f"/audit?workload={job}", hub.tokens["ada"]).json()["events"]]
    assert "node_lost" in kinds and "requeued" in kinds, kinds
    hub.call("DELETE", f"/workloads/{job}", tok)


def test_a_submission_has_its_position_before_the_next_cycle(tmp_path):
    """The positions listed come from the last scheduling cycle; work submitted since still
    answers ``GET workloads/{id}`` with its position (from its explanation). Cycles are held
    off here (a long cycle_delay and interval) so the answer cannot come from a cycle."""
    from realhub import RealHub
    with RealHub(tmp_path, extra_service_config="c.ComputeHubService.cycle_delay = 30\n"
                                                 "c.ComputeHubService.cycle_interval = 60\n") as hub:
        tok = hub.tokens["alice"]
        ids = [hub.call("POST", "/workloads", tok, json={"queue": "vision", "resources": {"gpu": 1},
                                                        "time_limit": 600}).json()["id"] for _ in range(2)]
        for n, wid in enumerate(ids, start=1):
            d = hub.call("GET", f"/workloads/{wid}", tok).json()
            assert d["state"] == "pending", d
            assert (d["position"], d["position_in_queue"]) == (n, n), d
        # One that would not fit even now says why, not "wait for a cycle": gpu-a is the only
        # east node, and the two above take two of its four GPUs when the cycle comes.
        east = hub.call("POST", "/workloads", tok, json={"queue": "vision", "resources": {"gpu": 4},
                                                         "node_selector": {"zone": "east"}}).json()["id"]
        reason = hub.call("GET", f"/workloads/{east}", tok).json()["explanation"]["reason"]
        assert "GPU" in reason and "next scheduling cycle" not in reason, reason
