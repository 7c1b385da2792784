"""Who may use a sub-queue that names no groups of its own: its nearest ancestor's groups, not
everyone (a team's sub-queue draws on the team's guarantee). Real hub, proxy and service
(realhub.py; users and groups as ``test_authz`` has them: alice and bob in vision, carol in
nlp, lin vision's team lead, ada an admin)."""

from __future__ import annotations

import pytest
from test_authz import call, wait_state

QUEUES = [("acc-team", {"parent": "org", "groups": ["vision"]}),
          ("acc-sub", {"parent": "acc-team"}),                         # no groups: vision's
          ("acc-mid", {"parent": "acc-team"}),
          ("acc-deep", {"parent": "acc-mid"}),                         # none on its parent either
          ("acc-own", {"parent": "acc-team", "groups": ["nlp"]})]     # its own groups decide


@pytest.fixture(scope="module")
def team_tree(hub):
    made = []
    try:
        for name, body in QUEUES:
            r = call(hub, "ada", "PUT", f"/api/v1/queues/{name}", {**body, "description": "access tests"})
            assert r.status_code in (200, 201), r.text
        yield made
    finally:
        for wid in made:
            call(hub, "ada", "DELETE", f"/api/v1/workloads/{wid}")
        for name, _ in reversed(QUEUES):
            call(hub, "ada", "DELETE", f"/api/v1/queues/{name}")


def submit(hub, who, queue, made):
    r = call(hub, who, "POST", "/api/v1/workloads", {"queue": queue, "resources": {"cpu": "100m"},
                                                      "name": f"{who}-access"})
    if r.status_code == 201:
        made.append(r.json()["id"])
    return r


@pytest.mark.parametrize("queue", ["acc-sub", "acc-deep"])
def test_a_sub_queue_without_groups_is_its_teams(hub, team_tree, queue):
    r = submit(hub, "carol", queue, team_tree)
    assert r.status_code == 403, r.text
    assert "open to groups vision (inherited: it names none of its own)" in r.json()["message"]
    r = submit(hub, "alice", queue, team_tree)
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    wait_state(hub, wid)
    # Vision's team lead sees the team's work there; another member of the team does not.
    assert call(hub, "lin", "GET", f"/api/v1/workloads/{wid}").status_code == 200
    assert wid in {w["id"] for w in call(hub, "lin", "GET", f"/api/v1/workloads?queue={queue}").json()["workloads"]}
    assert call(hub, "bob", "GET", f"/api/v1/workloads/{wid}").status_code == 404
    assert call(hub, "carol", "GET", f"/api/v1/workloads/{wid}").status_code == 404
    q = call(hub, "carol", "GET", f"/api/v1/queues/{queue}").json()
    assert q["groups"] == [] and q["open_to"] == ["vision"]


def test_a_sub_queue_naming_groups_is_theirs(hub, team_tree):
    assert submit(hub, "alice", "acc-own", team_tree).status_code == 403
    assert submit(hub, "carol", "acc-own", team_tree).status_code == 201
    assert call(hub, "ada", "GET", "/api/v1/queues/acc-own").json()["open_to"] == ["nlp"]


def test_the_queues_page_says_whose_a_sub_queue_is(hub, team_tree):
    page = call(hub, "ada", "GET", "/admin/")
    assert page.status_code == 200, page.text[:300]
    part = page.text.split('id="queue-acc-sub"', 1)[1].split("</article>", 1)[0]
    assert "groups (inherited): vision" in part and "open to everyone" not in part
