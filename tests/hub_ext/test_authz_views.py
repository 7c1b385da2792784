"""What the shared views show of other users' work, on the real hub, proxy and service: the
nodes (which workloads run where) and the queues (per-user limits by user name). Everyone may
read them; only what the caller may see anyway is named (``test_authz`` has the callers)."""

from __future__ import annotations

import pytest
from test_authz import call, wait_state

VISION_LIMITS = {"alice": {"gpu": 1}, "bob": {"gpu": 2}}


@pytest.fixture(scope="module")
def two_teams(hub):
    made, queues = [], {"views-v": ["vision"], "views-n": ["nlp"]}
    try:
        for name, groups in queues.items():
            body = {"parent": "org", "groups": groups}
            if name == "views-v":
                body["user_limits"] = VISION_LIMITS
            r = call(hub, "ada", "PUT", f"/api/v1/queues/{name}", body)
            assert r.status_code in (200, 201), r.text
        for who, queue in (("alice", "views-v"), ("carol", "views-n")):
            r = call(hub, who, "POST", "/api/v1/workloads",
                     {"queue": queue, "resources": {"cpu": "100m"}, "name": f"{who}-views"})
            assert r.status_code == 201, r.text
            made.append(wait_state(hub, r.json()["id"]))
        yield {w["user"]: w for w in made}
    finally:
        for w in made:
            call(hub, "ada", "DELETE", f"/api/v1/workloads/{w['id']}")
        for name in queues:
            call(hub, "ada", "DELETE", f"/api/v1/queues/{name}")


def on_nodes(hub, who: str, work: dict) -> list[dict]:
    """The entries the node listing gives ``who`` for the GPUs-and-all of ``work``'s node."""
    node = work["placement"][0]["node"]
    r = call(hub, who, "GET", "/api/v1/nodes")
    assert r.status_code == 200, r.text
    listing = {n["name"]: n for n in r.json()["nodes"]}[node]["workloads"]
    one = call(hub, who, "GET", f"/api/v1/nodes/{node}").json()["workloads"]
    assert one == listing
    return listing


@pytest.mark.parametrize("who, sees", [
    ("alice", {"alice"}), ("bob", set()), ("carol", {"carol"}), ("lin", {"alice"}), ("ada", {"alice", "carol"}),
])
def test_nodes_name_only_the_work_the_caller_may_see(hub, two_teams, who, sees):
    named = set()
    for owner, work in two_teams.items():
        entries = on_nodes(hub, who, work)
        ids = {e["id"] for e in entries}
        if owner in sees:
            assert work["id"] in ids, (who, entries)
            assert next(e for e in entries if e["id"] == work["id"])["user"] == owner
            named.add(owner)
        else:       # there, by its GPUs, but neither its id nor its owner
            assert work["id"] not in ids and owner not in {e["user"] for e in entries}, (who, entries)
            assert any(e["id"] is None and e["user"] is None for e in entries), (who, entries)
    assert named == sees


@pytest.mark.parametrize("who, sees", [
    ("alice", {"alice"}), ("bob", {"bob"}), ("carol", set()), ("lin", {"alice", "bob"}), ("ada", {"alice", "bob"}),
])
def test_queues_show_per_user_limits_of_the_caller_only(hub, two_teams, who, sees):
    one = call(hub, who, "GET", "/api/v1/queues/views-v")
    assert one.status_code == 200, one.text
    listed = {q["name"]: q for q in call(hub, who, "GET", "/api/v1/queues").json()["queues"]}["views-v"]
    for q in (one.json(), listed):
        assert set(q["user_limits"]) == sees, (who, q["user_limits"])
        assert all(q["user_limits"][u] == VISION_LIMITS[u] for u in sees)
