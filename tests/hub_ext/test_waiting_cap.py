"""ComputeHubService.max_waiting_per_user through the real hub, proxy and service: a user with
as many workloads in line as the cap gets a 429 with a sentence to act on, from the API and from
`computehub submit`; another user is not held back; a cancel makes room. Nothing emulated."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from realhub import RealHub  # noqa: E402
from test_cli_client import cli, one_line_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spawner"))
from localhub import wait_for  # noqa: E402


def test_a_user_with_as_many_workloads_in_line_as_the_cap_is_told_so(tmp_path):
    with RealHub(tmp_path, extra_service_config="c.ComputeHubService.max_waiting_per_user = 2\n") as hub:
        alice, bob = hub.tokens["alice"], hub.tokens["bob"]

        def submit(token, gpus=4):
            return hub.call("POST", "/workloads", token, json={"queue": "vision", "kind": "batch",
                                                               "resources": {"gpu": gpus}})

        running = [submit(alice).json()["id"] for _ in range(2)]       # the cluster's 8 GPUs
        wait_for("both admitted", lambda: all(
            hub.call("GET", f"/workloads/{w}", alice).json()["state"] == "admitted" for w in running), 30)
        line = [submit(alice) for _ in range(2)]
        assert [r.status_code for r in line] == [201, 201] and {r.json()["state"] for r in line} == {"pending"}
        r = submit(alice, gpus=1)
        assert r.status_code == 429, r.text
        assert r.json() == {"error": "too_many_waiting", "message": (
            "alice already has 2 workloads waiting in line (pending), the most one user may have here (the "
            "service's max_waiting_per_user): cancel some, or submit more once some have started")}
        error = one_line_error(cli(hub, "alice", "submit", "--gpus=1", "--queue=vision"))
        assert "alice already has 2 workloads waiting in line" in error
        assert submit(bob, gpus=1).status_code == 201                 # bob is not held back
        assert hub.call("DELETE", f"/workloads/{line[0].json()['id']}", alice).status_code in (200, 202)
        assert submit(alice, gpus=1).status_code == 201               # a cancel made room
        mine = hub.call("GET", "/workloads", alice, params={"state": "pending"}).json()["workloads"]
        assert len([w for w in mine if w["user"] == "alice"]) == 2
