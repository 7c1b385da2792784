"""Ended work through the real hub, proxy and service: listing it newest first, a page at a
time, only what the caller may see; and the retention settings purging it (and the audit log
and the ledger) while live work stays. ``bench/history.py`` measures the same reads with a
year of history."""

from __future__ import annotations

import os
import time

import pytest
from realhub import RealHub
from test_authz import call
from test_cli_client import cli, ok, one_line_error

ENDED = "state=finished&state=failed&state=cancelled&state=preempted&state=reclaimed&state=rejected"


def submit_and_cancel(hub, who: str, queue: str, n: int, kind: str = "batch") -> list[str]:
    ids = []
    for i in range(n):
        r = call(hub, who, "POST", "/api/v1/workloads",
                 {"queue": queue, "kind": kind, "resources": {"cpu": "100m"}, "name": f"{who}-{i}"})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
        assert call(hub, who, "DELETE", f"/api/v1/workloads/{ids[-1]}").status_code in (200, 202)
    return ids


@pytest.fixture(scope="module")
def history(hub):
    queues = {"hist-v": ["vision"], "hist-n": ["nlp"]}
    for name, groups in queues.items():
        r = call(hub, "ada", "PUT", f"/api/v1/queues/{name}", {"parent": "org", "groups": groups})
        assert r.status_code in (200, 201), r.text
    ids = {"alice": submit_and_cancel(hub, "alice", "hist-v", 5),
           "bob": (submit_and_cancel(hub, "bob", "hist-v", 3)
                   + submit_and_cancel(hub, "bob", "hist-v", 1, "training")),
           "carol": submit_and_cancel(hub, "carol", "hist-n", 4)}
    yield ids
    for name in queues:
        call(hub, "ada", "DELETE", f"/api/v1/queues/{name}")


def listed(hub, who: str, query: str) -> dict:
    r = call(hub, who, "GET", f"/api/v1/workloads?{ENDED}&{query}")
    assert r.status_code == 200, r.text
    return r.json()


def test_ended_work_pages_newest_first_and_each_caller_sees_only_theirs(hub, history):
    alice, bob, carol = history["alice"], history["bob"], history["carol"]
    # A user: their own only, newest first, a page at a time, total counted in the database.
    page = listed(hub, "alice", "queue=hist-v&order=newest&limit=2")
    assert [w["id"] for w in page["workloads"]] == alice[::-1][:2] and page["total"] == 5
    page = listed(hub, "alice", "queue=hist-v&order=newest&limit=2&offset=4")
    assert [w["id"] for w in page["workloads"]] == [alice[0]] and page["order"] == "newest"
    assert [w["id"] for w in listed(hub, "alice", "queue=hist-v")["workloads"]] == alice   # oldest first
    # The team lead of vision: alice's and bob's there, never carol's in nlp.
    lin = listed(hub, "lin", "order=newest&limit=100")
    seen = {w["id"] for w in lin["workloads"]}
    assert set(alice + bob) <= seen and not seen & set(carol)
    assert listed(hub, "lin", "queue=hist-v")["total"] == 9 and listed(hub, "lin", "queue=hist-n")["total"] == 0
    # Kinds filter in the query (repeatable); an admin sees all.
    assert [w["id"] for w in listed(hub, "bob", "queue=hist-v&kind=training")["workloads"]] == bob[3:]
    assert listed(hub, "bob", "queue=hist-v&kind=training&kind=batch")["total"] == 4
    assert listed(hub, "ada", "queue=hist-n&order=newest")["workloads"][0]["id"] == carol[-1]
    # A mistaken order is a 400 that says what is allowed.
    r = call(hub, "alice", "GET", f"/api/v1/workloads?{ENDED}&order=latest")
    assert r.status_code == 400 and "newest" in r.json()["message"]


def test_cli_shows_the_latest_jobs(hub, history):
    """``computehub jobs --all --limit N``: the user's latest N, newest at the bottom, with a
    footer saying how many there are."""
    r = cli(hub, "alice", "jobs", "--all", "--limit", "3")
    lines = ok(r).splitlines()
    assert [ln.split()[0] for ln in lines[1:4]] == history["alice"][-3:], r.stdout
    assert lines[-1].startswith("(your latest 3 of ") and "--limit N" in lines[-1]
    assert "--limit must be 1 to 10000" in one_line_error(cli(hub, "alice", "jobs", "--all", "--limit", "0"))


RETENTION = """
c.ComputeHubService.workload_retention_days = 3 / 86400      # 3 seconds
c.ComputeHubService.audit_retention_days = 3 / 86400
c.ComputeHubService.usage_retention_days = 3 / 86400
c.ComputeHubService.retention_interval = 1
"""


def test_retention_purges_ended_work_audit_and_ledger_but_never_live_work(tmp_path):
    with RealHub(tmp_path, extra_service_config=RETENTION) as hub:
        ended = submit_and_cancel(hub, "alice", "vision", 3)
        r = call(hub, "alice", "POST", "/api/v1/workloads", {"queue": "vision", "resources": {"gpu": 1}})
        assert r.status_code == 201, r.text
        live = r.json()["id"]
        r = call(hub, "bob", "POST", "/api/v1/workloads",
                 {"queue": "vision", "resources": {"gpu": 4}, "workers": 2})
        waiting = r.json()["id"]
        logs = hub.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for wid in (ended[0], live):
            (logs / f"{wid}.log").write_text("a line\n")
            os.utime(logs / f"{wid}.log", (time.time() - 3600, time.time() - 3600))
        deadline = time.time() + 30
        while (listed(hub, "ada", "")["total"] or (logs / f"{ended[0]}.log").exists()) \
                and time.time() < deadline:
            time.sleep(0.5)
        assert listed(hub, "ada", "")["total"] == 0
        for wid in ended:
            assert call(hub, "alice", "GET", f"/api/v1/workloads/{wid}").status_code == 404
        assert call(hub, "alice", "GET", f"/api/v1/workloads/{live}").json()["state"] in ("admitted", "running")
        assert not (logs / f"{ended[0]}.log").exists() and (logs / f"{live}.log").exists()
        assert call(hub, "bob", "GET", f"/api/v1/workloads/{waiting}").json()["state"] == "pending"
        audit = call(hub, "ada", "GET", "/api/v1/audit").json()["events"]
        assert not {e["workload_id"] for e in audit} & set(ended)
        # The live workload's ledger interval is open: its GPU-hours still count.
        rows = call(hub, "ada", "GET", "/api/v1/usage?by=user").json()["rows"]
        assert [r["user"] for r in rows if r.get("gpu_hours", 0) > 0] == ["alice"], rows
        # Ids are never handed out again, even after a restart.
        hub.stop()
        hub.start()
        r = call(hub, "carol", "POST", "/api/v1/workloads", {"queue": "nlp", "resources": {"cpu": "100m"}})
        assert r.status_code == 201 and r.json()["id"] > max(ended + [live, waiting]), r.json()
