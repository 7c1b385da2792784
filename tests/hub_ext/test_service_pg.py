"""The REST API's basic flow with the service on PostgreSQL.

The session ``hub`` fixture runs the service on SQLite; this test starts a hub of
its own (real JupyterHub, real configurable-http-proxy, the service as a managed
service) whose service stores everything in a fresh database on the real
PostgreSQL server of ``pg_db_url``, and walks the flow: submit, list, get with
its explanation, cancel, an admin changing a queue, and the audit log showing
the change with before and after. It then reads the database directly to show
that the data went to PostgreSQL (and that no SQLite file was made).
"""

from __future__ import annotations

import time

import pytest

from realhub import RealHub
from scheduler.store.sql import SqlStore


@pytest.fixture
def pg_hub(tmp_path, pg_db_url):
    h = RealHub(tmp_path, db_url=pg_db_url)
    try:
        h.start()
        yield h
    finally:
        h.stop()


def wait_state(hub, token, wid, state, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        w = hub.call("GET", f"/workloads/{wid}", token).json()
        if w["state"] == state or time.monotonic() > deadline:
            return w
        time.sleep(0.1)


@pytest.mark.slow
def test_api_flow_on_postgresql(pg_hub, pg_db_url):
    hub = pg_hub
    alice, bob, ada = hub.tokens["alice"], hub.tokens["bob"], hub.tokens["ada"]
    east = {"queue": "vision", "resources": {"gpu": 4}, "node_selector": {"zone": "east"}}

    # Submit: the first fills gpu-a, the second must wait for it.
    r = hub.call("POST", "/workloads", alice, json={"name": "pg-first", **east})
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["user"] == "alice" and first["state"] == "pending"
    assert r.headers["Location"].endswith(f"/api/v1/workloads/{first['id']}")
    assert wait_state(hub, alice, first["id"], "admitted")["state"] == "admitted"
    r = hub.call("POST", "/workloads", alice, json={"name": "pg-second", **east})
    assert r.status_code == 201, r.text
    second = r.json()

    # List: alice sees both; bob sees neither.
    r = hub.call("GET", "/workloads", alice)
    assert r.status_code == 200
    assert {w["id"] for w in r.json()["workloads"]} == {first["id"], second["id"]}
    r = hub.call("GET", "/workloads", bob)
    assert r.status_code == 200 and r.json()["workloads"] == []
    assert hub.call("GET", f"/workloads/{second['id']}", bob).status_code == 404

    # Get with its explanation: pending behind the first, and why.
    r = hub.call("GET", f"/workloads/{second['id']}", alice)
    assert r.status_code == 200
    w = r.json()
    assert w["state"] == "pending"
    e = w["explanation"]
    assert e["id"] == second["id"] and e["state"] == "pending" and e["queue"] == "vision"
    assert "GPU" in e["reason"]

    # Cancel: only alice (or an admin) may; it ends cancelled and leaves the live list.
    assert hub.call("DELETE", f"/workloads/{second['id']}", bob).status_code == 404
    r = hub.call("DELETE", f"/workloads/{second['id']}", alice)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert hub.call("DELETE", f"/workloads/{second['id']}", alice).status_code == 409
    r = hub.call("GET", "/workloads", alice)
    assert [w["id"] for w in r.json()["workloads"]] == [first["id"]]
    r = hub.call("GET", "/workloads", alice, params={"state": "cancelled"})
    assert [w["id"] for w in r.json()["workloads"]] == [second["id"]]

    # An admin changes queues; users may not.
    assert hub.call("PATCH", "/queues/vision", alice, json={"user_limit": {"gpu": 6}}).status_code == 403
    r = hub.call("PATCH", "/queues/vision", ada, json={"user_limit": {"gpu": 6}})
    assert r.status_code == 200, r.text
    assert r.json()["user_limit"] == {"gpu": 6}
    r = hub.call("PUT", "/queues/speech", ada, json={"parent": "org", "guaranteed": {"gpu": 1}, "groups": ["nlp"]})
    assert r.status_code == 201, r.text
    r = hub.call("GET", "/queues/vision", alice)
    assert r.status_code == 200 and r.json()["user_limit"] == {"gpu": 6}

    # The audit log shows who changed what, before → after.
    assert hub.call("GET", "/audit", alice).status_code == 403
    r = hub.call("GET", "/audit", ada, params={"kind": "queue_updated"})
    assert r.status_code == 200
    mine = [e for e in r.json()["events"] if e["data"].get("actor") == "ada"]
    assert [e["data"]["queue"] for e in mine] == ["vision", "speech"]
    patch, put = mine
    assert patch["data"]["before"]["user_limit"] == {"gpu": 8}
    assert patch["data"]["after"]["user_limit"] == {"gpu": 6}
    assert put["data"]["before"] is None and put["data"]["after"]["guaranteed"] == {"gpu": 1}
    r = hub.call("GET", "/audit", ada, params={"workload": second["id"]})
    assert [e["kind"] for e in r.json()["events"]] == ["submitted", "cancelled"]

    # It all went to PostgreSQL.
    store = SqlStore(pg_db_url, migrate=False)
    try:
        assert store.dialect == "postgresql"
        assert store.get_workload(first["id"]).state == "admitted"
        assert store.get_workload(second["id"]).state == "cancelled"
        kinds = [e.kind for e in store.get_events(kinds=("queue_updated",)) if e.data.get("actor") == "ada"]
        assert kinds == ["queue_updated", "queue_updated"]
    finally:
        store.close()
    assert not list(hub.data_dir.glob("*.sqlite*"))
