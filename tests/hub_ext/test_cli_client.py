"""The installed ``computehub`` client commands against the session's real hub.

Every test leaves the shared hub as it found it: workloads it submits are
cancelled, queue settings and drains restored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from realhub import free_port

ENV_VARS = ("COMPUTEHUB_URL", "COMPUTEHUB_TOKEN", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_URL",
            "JUPYTERHUB_PUBLIC_HUB_URL")


def computehub() -> str:
    exe = shutil.which("computehub", path=os.path.dirname(sys.executable)) or shutil.which("computehub")
    if exe is None:
        pytest.fail("the computehub console script is not installed; run `pip install -e .`", pytrace=False)
    return exe


def cli(hub, user: str | None, *args: str, url: str | None = None, env_extra: dict | None = None
        ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS} | (env_extra or {})
    env["COMPUTEHUB_URL"] = url or hub.service_url
    if user:
        env["JUPYTERHUB_API_TOKEN"] = hub.tokens[user]
    return subprocess.run([computehub(), *args], capture_output=True, text=True, timeout=60, env=env)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess, rc: int = 2) -> str:
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("computehub: error: "), r.stderr
    return lines[0]


@pytest.fixture
def submitted(hub):
    """Ids submitted in a test, cancelled afterwards (whoever submitted them)."""
    ids: list[tuple[str, str]] = []
    yield ids
    for user, wid in ids:
        hub.call("DELETE", f"/workloads/{wid}", hub.tokens[user])


def submit(hub, submitted, user: str, *args: str) -> dict:
    w = json.loads(ok(cli(hub, user, "submit", "--json", *args)))
    submitted.append((user, w["id"]))
    return w


def admitted(hub, submitted, user: str, *args: str) -> dict:
    """Submitted with ``computehub submit`` and admitted (within 15 s)."""
    w = submit(hub, submitted, user, *args)
    deadline = time.time() + 15
    while hub.call("GET", f"/workloads/{w['id']}", hub.tokens[user]).json()["state"] != "admitted":
        assert time.time() < deadline, "not admitted"
        time.sleep(0.1)
    return w


def test_submit_queue_and_cancel(hub, submitted):
    gang = ("--kind", "batch", "--gpus", "4", "--workers", "2", "--time", "2h")
    first = submit(hub, submitted, "alice", *gang, "--name", "cli-first", "--checkpoint-every", "20m")
    assert first["resources"]["gpu"] == 4 and first["workers"] == 2 and first["time_limit"] == 7200
    assert first["checkpoint_every"] == 1200
    out = ok(cli(hub, "alice", "submit", *gang, "--name", "cli-second"))
    wid = out.split()[0]
    submitted.append(("alice", wid))
    assert wid.startswith("w") and ("pending" in out.split()[1] or "admitted" in out.split()[1])
    # Two gangs of 8 GPUs on 8 GPUs under alice's 8-GPU limit: one of them waits.
    deadline = time.time() + 15
    while True:
        listing = json.loads(ok(cli(hub, "alice", "queue", "--json")))
        mine = {w["id"]: w for w in listing["workloads"]}
        assert {first["id"], wid} <= set(mine)
        assert all(w["user"] == "alice" for w in listing["workloads"])
        waiting = [mine[i] for i in (first["id"], wid) if mine[i]["state"] == "pending"]
        if waiting and waiting[0].get("explanation", {}).get("blocker") or time.time() > deadline:
            break
        time.sleep(0.3)
    assert waiting, mine
    e = waiting[0]["explanation"]
    assert e["position"] >= 1 and e["reason"]
    table = ok(cli(hub, "alice", "queue"))
    header, *rows = table.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "QUEUE"] and "POS" in header and "REASON" in header
    row = next(r for r in rows if r.startswith(waiting[0]["id"]))
    assert "pending" in row and f"{e['position']} ({e['position_in_queue']})" in row
    assert e["reason"] in row
    # An 8-GPU gang in vision (guaranteed 4) would start on borrowed GPUs: its ETA (when the
    # other gang's 2 h limit ends) is a lower bound, marked so in the table.
    assert e["eta_earliest"] is True and 0 < e["eta_seconds"] <= 7200, e
    assert re.search(r"  ≥ (2h|1h59m)  ", row), row
    # `computehub jobs` says why it waits too.
    row = next(r for r in ok(cli(hub, "alice", "jobs")).splitlines() if r.startswith(waiting[0]["id"]))
    assert "pending" in row and e["reason"][:100] in row, row

    out = ok(cli(hub, "alice", "cancel", first["id"], wid))
    assert out.splitlines() == [f"{first['id']}  cancelled", f"{wid}  cancelled"]
    line = one_line_error(cli(hub, "alice", "cancel", wid))
    assert wid in line and "already ended" in line
    assert wid not in ok(cli(hub, "alice", "queue"))


def test_queue_says_when_running_work_last_saved_a_checkpoint(hub, submitted):
    w = admitted(hub, submitted, "alice", "--kind", "batch", "--cpu", "100m", "--name", "cli-saver")
    r = hub.call("POST", f"/workloads/{w['id']}/status", hub.launcher_token, json={"state": "running"})
    assert r.status_code == 200, r.text
    row = next(r for r in ok(cli(hub, "alice", "queue")).splitlines() if r.startswith(w["id"]))
    assert "running" in row and "checkpoint saved" not in row
    time.sleep(0.2)
    started = r.json()["started_at"]
    r = hub.call("POST", f"/workloads/{w['id']}/status", hub.launcher_token,
                 json={"state": "checkpoint", "at": started + 0.1})
    assert r.status_code == 200, r.text
    row = next(r for r in ok(cli(hub, "alice", "queue")).splitlines() if r.startswith(w["id"]))
    assert re.search(r"checkpoint saved \d+s ago$", row), row


def test_others_workloads_stay_hidden(hub, submitted):
    w = submit(hub, submitted, "carol", "--gpus", "1", "--time", "10m")
    assert w["id"] not in ok(cli(hub, "alice", "queue", "--all"))
    line = one_line_error(cli(hub, "alice", "cancel", w["id"]))
    assert f"no workload {w['id']!r}" in line
    assert w["id"] in ok(cli(hub, "ada", "queue", "--all", "--queue", "nlp"))


def test_quota_lists_queues_with_numbers(hub):
    out = ok(cli(hub, "alice", "quota"))
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["QUEUE", "GUAR", "EFF", "LIMIT"]
    by_name = {r.split()[0]: r.split() for r in rows}
    assert by_name["vision"][1] == "4" and by_name["nlp"][1] == "4" and by_name["org"][2] == "8"
    data = json.loads(ok(cli(hub, "alice", "quota", "--json")))
    assert {q["name"] for q in data["queues"]} >= {"org", "vision", "nlp"}


def test_admin_sets_quota_and_it_is_restored(hub):
    before = hub.call("GET", "/queues/vision", hub.tokens["ada"]).json()
    try:
        out = ok(cli(hub, "ada", "quota", "set", "vision", "--weight", "2", "--limit-gpus", "6"))
        assert out.strip() == "queue vision: guaranteed 4 GPUs, limit 6, weight 2, per-user limit 8"
        after = hub.call("GET", "/queues/vision", hub.tokens["ada"]).json()
        assert after["weight"] == 2 and after["limit"] == {"gpu": 6}
        assert after["guaranteed"] == before["guaranteed"] and after["groups"] == before["groups"]
        ok(cli(hub, "ada", "quota", "set", "vision", "--limit-gpus", "none"))
        assert hub.call("GET", "/queues/vision", hub.tokens["ada"]).json()["limit"] == {}
    finally:
        r = hub.call("PATCH", "/queues/vision", hub.tokens["ada"],
                     json={k: before[k] for k in ("weight", "limit", "guaranteed", "user_limit")})
        assert r.status_code == 200, r.text


def test_quota_set_is_refused_to_a_user(hub):
    line = one_line_error(cli(hub, "alice", "quota", "set", "vision", "--weight", "3"))
    assert "lacks the scope to administer ComputeHub" in line
    assert hub.call("GET", "/queues/vision", hub.tokens["alice"]).json()["weight"] != 3


def test_admin_drains_and_undrains_a_node(hub):
    def draining() -> bool:
        return hub.call("GET", "/nodes/gpu-b", hub.tokens["ada"]).json()["draining"]

    try:
        assert ok(cli(hub, "ada", "nodes", "drain", "gpu-b")).startswith("node gpu-b: draining")
        assert draining()
        row = next(r for r in ok(cli(hub, "alice", "nodes")).splitlines() if r.startswith("gpu-b"))
        assert "draining" in row
        one_line_error(cli(hub, "alice", "nodes", "undrain", "gpu-b"))
        assert ok(cli(hub, "ada", "nodes", "undrain", "gpu-b")).startswith("node gpu-b: ok")
        assert not draining()
        assert "unknown node 'gpu-z'" in one_line_error(cli(hub, "ada", "nodes", "drain", "gpu-z"))
    finally:
        hub.call("PATCH", "/nodes/gpu-b", hub.tokens["ada"], json={"draining": False})


def test_a_node_cordoned_in_kubernetes_is_shown_so_and_not_undrained_here(hub):
    kube = {"gpus": 2, "gpu_model": "a100", "cpu": 16, "memory": "64Gi", "draining": True,
            "labels": {"computehub/source": "kubernetes", "computehub/cordoned": "true"}}
    assert hub.call("PUT", "/nodes/kube-c", hub.tokens["ada"], json=kube).status_code == 201
    try:
        row = next(r for r in ok(cli(hub, "ada", "nodes")).splitlines() if r.startswith("kube-c"))
        assert "draining,cordoned,kubernetes" in row
        line = one_line_error(cli(hub, "ada", "nodes", "undrain", "kube-c"))
        assert "cordoned in Kubernetes" in line and "kubectl uncordon kube-c" in line
        assert hub.call("GET", "/nodes/kube-c", hub.tokens["ada"]).json()["draining"] is True
    finally:
        hub.call("DELETE", "/nodes/kube-c", hub.tokens["ada"])


def test_usage(hub, submitted):
    w = admitted(hub, submitted, "alice", "--gpus", "1", "--queue", "vision", "--name", "usage-run")
    time.sleep(1.1)                       # a GPU-second or so to count
    ok(cli(hub, "alice", "cancel", w["id"]))
    data = json.loads(ok(cli(hub, "alice", "usage", "--json", "--since", "1d", "--by", "queue")))
    by_queue = {r["queue"]: r for r in data["rows"]}
    assert data["by"] == "queue" and by_queue["vision"]["gpu_seconds"] >= 1.0, data
    assert 86000 < data["end"] - data["start"] < 86800
    out = ok(cli(hub, "ada", "usage", "--by", "user"))
    assert out.startswith("GPU usage ")
    # By workload, each row says whose it is and its queue.
    header, *rows = ok(cli(hub, "ada", "usage", "--by", "workload", "--since", "1d")).splitlines()[1:]
    assert header.split()[:5] == ["WORKLOAD", "USER", "QUEUE", "GPU-HOURS", "COST"], header
    assert any(r.split()[:3] == [w["id"], "alice", "vision"] for r in rows), rows
    # By job array: its tasks' GPU-hours as one row, whose and where.
    arr = submit(hub, submitted, "alice", "--gpus", "1", "--queue", "vision", "--array", "0-1")
    submitted.extend(("alice", t) for t in arr["tasks"][1:])
    for t in arr["tasks"]:
        deadline = time.time() + 15
        while hub.call("GET", f"/workloads/{t}", hub.tokens["alice"]).json()["state"] != "admitted":
            assert time.time() < deadline, "not admitted"
            time.sleep(0.1)
    time.sleep(1.1)
    ok(cli(hub, "alice", "cancel", "--array", arr["id"]))
    header, *rows = ok(cli(hub, "ada", "usage", "--by", "array", "--since", "1d")).splitlines()[1:]
    assert header.split()[:3] == ["ARRAY", "USER", "QUEUE"], header
    assert any(r.split()[:3] == [arr["id"], "alice", "vision"] for r in rows), rows
    assert not any(r.split()[0] == w["id"] for r in rows)                 # work alone is not an array


def test_approvals_reject(hub, submitted):
    w = submit(hub, submitted, "carol", "--gpus", "4", "--workers", "2", "--time", "1h")
    assert w["state"] == "awaiting_approval"
    assert w["id"] in ok(cli(hub, "ada", "approvals"))
    assert "lacks the scope" in one_line_error(cli(hub, "carol", "approvals"))
    assert "--reason" in one_line_error(cli(hub, "ada", "reject", w["id"]))
    out = ok(cli(hub, "ada", "reject", w["id"], "--reason", "split it into smaller runs"))
    assert out.startswith(f"{w['id']}  rejected")


@pytest.mark.parametrize("args, expected", [
    (["submit", "--gpus", "-1"], "--gpus must be 0 or more"),
    (["submit", "--time", "banana"], "--time expects seconds or a duration"),
    (["submit", "--queue", "nope", "--time", "1h"], "unknown queue 'nope'"),
    (["submit", "--memory", "lots"], "memory must look like"),
    (["submit", "--kind", "party"], "--kind expects any of"),
    (["usage", "--by", "team"], "--by expects any of"),
    (["usage", "--since", "yesterday"], "--since expects a duration"),
    (["cancel"], "needs one or more workload ids"),
    (["quota", "set", "vision"], "nothing to change"),
    (["queue", "extra"], "unexpected argument 'extra'"),
    (["infer", "--workers", "2", "--", "true"], "unknown option --workers"),     # copies are --replicas
    (["infer", "--kind", "batch", "--", "true"], "unknown option --kind"),
])
def test_bad_input_is_one_line(hub, args, expected):
    assert expected in one_line_error(cli(hub, "alice", *args))


def test_no_token_says_how_to_set_one(hub):
    line = one_line_error(cli(hub, None, "queue"))
    assert "no API token" in line and "COMPUTEHUB_TOKEN" in line


def test_unreachable_and_wrong_urls(hub):
    url = f"http://127.0.0.1:{free_port()}/services/computehub"
    line = one_line_error(cli(hub, "alice", "queue", url=url), rc=1)
    assert line == f"computehub: error: cannot reach ComputeHub at {url}: Connection refused"
    wrong = hub.url + "/services/nothere"
    assert "no ComputeHub service at" in one_line_error(cli(hub, "alice", "quota", url=wrong))


def test_admin_creates_and_deletes_queues_and_classes(hub):
    out = ok(cli(hub, "ada", "quota", "create", "cli-q", "--parent", "org", "--guaranteed-gpus", "0",
                 "--limit-gpus", "0", "--groups", "vision"))
    assert "created queue cli-q under org" in out
    q = hub.call("GET", "/queues/cli-q", hub.tokens["ada"]).json()
    assert q["limit"] == {"gpu": 0} and q["groups"] == ["vision"]      # a limit of 0 is kept
    assert "exists already" in one_line_error(cli(hub, "ada", "quota", "create", "cli-q"))
    assert "admin" in one_line_error(cli(hub, "alice", "quota", "delete", "cli-q"))
    assert "deleted queue cli-q" in ok(cli(hub, "ada", "quota", "delete", "cli-q"))
    assert hub.call("GET", "/queues/cli-q", hub.tokens["ada"]).status_code == 404
    out = ok(cli(hub, "ada", "classes", "set", "cli-urgent", "--rank", "350", "--no-preemptible"))
    assert "rank 350, preemptible no" in out
    listed = ok(cli(hub, "alice", "classes"))
    assert "cli-urgent" in listed and "interactive" in listed
    assert "cannot borrow" not in listed
    assert "deleted class cli-urgent" in ok(cli(hub, "ada", "classes", "delete", "cli-urgent"))
    # A class whose work may be swapped for shorter work only after 30 minutes of running, and
    # whose work checkpoints every 30 minutes after a minute of loading.
    ok(cli(hub, "ada", "classes", "set", "cli-ckpt", "--rank", "150", "--preempt-after", "600",
           "--swap-after", "1800", "--checkpoint-every", "1800", "--startup", "60"))
    c = hub.call("GET", "/classes", hub.tokens["ada"]).json()["classes"]
    assert [(x["preempt_after"], x["swap_after"], x["checkpoint_every"], x["startup"])
            for x in c if x["name"] == "cli-ckpt"] == [(600, 1800, 1800, 60)]
    row = next(r for r in ok(cli(hub, "alice", "classes")).splitlines() if r.startswith("cli-ckpt"))
    assert "600s" in row and "1800s" in row and "every 1800s after 60s" in row
    line = one_line_error(cli(hub, "ada", "classes", "set", "cli-ckpt", "--rank", "150", "--preempt-after", "600",
                              "--swap-after", "60"))
    assert "swap_after (60 s) is below preempt_after (600 s)" in line
    line = one_line_error(cli(hub, "ada", "classes", "set", "cli-ckpt", "--rank", "150", "--checkpoint-every", "0"))
    assert "checkpoint_every must be between 1" in line
    c = hub.call("GET", "/classes", hub.tokens["ada"]).json()["classes"]
    assert [x["checkpoint_every"] for x in c if x["name"] == "cli-ckpt"] == [1800]     # unchanged
    # Its images save on SIGTERM: the admin says so (nothing else given changes), and the listing shows it.
    ok(cli(hub, "ada", "classes", "set", "cli-ckpt", "--saves-on-stop"))
    c = hub.call("GET", "/classes", hub.tokens["ada"]).json()["classes"]
    assert [(x["saves_on_stop"], x["rank"], x["preempt_after"], x["swap_after"], x["checkpoint_every"],
             x["startup"]) for x in c if x["name"] == "cli-ckpt"] == [(True, 150, 600, 1800, 1800, 60)]
    row = next(r for r in ok(cli(hub, "alice", "classes")).splitlines() if r.startswith("cli-ckpt"))
    assert " on stop " in row, row
    # Only nlp's members may submit with it now; others get a 403 that says so.
    ok(cli(hub, "ada", "classes", "set", "cli-ckpt", "--groups", "nlp"))
    c = hub.call("GET", "/classes/cli-ckpt", hub.tokens["ada"]).json()
    assert c["groups"] == ["nlp"] and c["saves_on_stop"] is True and c["rank"] == 150
    body = {"queue": "nlp", "priority": "cli-ckpt", "resources": {"cpu": "100m"}, "name": "cli-class-groups"}
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json={**body, "queue": "vision"})
    assert r.status_code == 403 and "priority class 'cli-ckpt' is open to groups nlp" in r.json()["message"], r.text
    r = hub.call("POST", "/workloads", hub.tokens["carol"], json=body)
    assert r.status_code == 201 and r.json()["priority"] == "cli-ckpt", r.text
    assert hub.call("DELETE", f"/workloads/{r.json()['id']}", hub.tokens["carol"]).status_code in (200, 202, 204)
    assert "deleted class cli-ckpt" in ok(cli(hub, "ada", "classes", "delete", "cli-ckpt"))
    assert "unknown priority class" in one_line_error(cli(hub, "ada", "classes", "delete", "cli-urgent"))


def test_another_users_output_cannot_drive_the_readers_terminal(hub):
    """An admin reading alice's job output sees its control characters as escapes (\\x1b),
    unless asking for them with --raw."""
    w = hub.call("POST", "/workloads", hub.tokens["alice"],
                 json={"queue": "vision", "resources": {"cpu": "100m"}, "name": "cli-escapes"}).json()
    try:
        (hub.data_dir / "logs" / f"{w['id']}.log").write_text("step 1\n\x1b[2J\x1b]0;owned\x07cleared\n")
        out = ok(cli(hub, "ada", "logs", w["id"]))
        assert "\x1b" not in out and "\x07" not in out, repr(out)
        assert "step 1\n\\x1b[2J\\x1b]0;owned\\x07cleared" in out, repr(out)
        raw = ok(cli(hub, "ada", "logs", w["id"], "--raw"))
        assert "\x1b[2J" in raw and "\x07" in raw
    finally:
        hub.call("DELETE", f"/workloads/{w['id']}", hub.tokens["alice"])
