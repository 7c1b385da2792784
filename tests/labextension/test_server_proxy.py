"""The server extension's proxy to ComputeHub, through a real jupyter_server (pytest-jupyter)
and a REAL ComputeHub service behind a real JupyterHub and proxy (RealHub).

Nothing is emulated: the extension calls the service with a token of alice's
scoped like a single-user server's (custom:computehub:submit and access to the
service), the service checks it with the hub. The cluster is the service's
declared node list (one node, 2 GPUs).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError
from traitlets.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from realhub import RealHub  # noqa: E402

SERVICE = """
c.ComputeHubService.nodes = [{"name": "local", "gpus": 2, "gpu_model": "a100", "cpu": 16, "memory": "64Gi"}]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 2}, "limit": {"gpu": 2}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "groups": ["nlp"]},
]
"""
SERVER_SCOPES = ["custom:computehub:submit", "access:services!service=computehub"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with RealHub(tmp_path_factory.mktemp("hub"), extra_service_config=SERVICE) as h:
        h.server_token = h.make_token("alice", scopes=SERVER_SCOPES)
        yield h


@pytest.fixture
def lab_config():
    return {}


@pytest.fixture
def jp_server_config(hub, lab_config, monkeypatch):
    for var in ("COMPUTEHUB_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_PUBLIC_URL", "COMPUTEHUB_WORKLOAD_ID"):
        monkeypatch.delenv(var, raising=False)
    cfg = {"service_url": hub.service_url, "api_token": hub.server_token, "public_prefix": "/services/computehub/"}
    cfg.update(lab_config)
    return Config({"ServerApp": {"jpserver_extensions": {"labextension": True}}, "ComputeHubLab": cfg})


async def fetch(jp_fetch, *parts, method="GET", **kw):
    try:
        r = await jp_fetch("computehub", *parts, method=method, **kw)
    except HTTPClientError as e:
        return e.code, json.loads(e.response.body)
    return r.code, json.loads(r.body)


def submit(hub, user, **body):
    r = hub.call("POST", "/workloads", hub.tokens[user], json=body)
    assert r.status_code == 201, r.text
    return r.json()


def cancel_all(hub):
    for u in ("alice", "bob"):
        for w in hub.call("GET", f"/workloads?user={u}&limit=10000", hub.launcher_token).json()["workloads"]:
            hub.call("DELETE", f"/workloads/{w['id']}", hub.launcher_token)


async def test_my_work_with_position_reason_eta_and_queue_usage(jp_fetch, hub):
    cancel_all(hub)
    busy = submit(hub, "bob", name="bob-big", kind="training", resources={"gpu": 2}, time_limit=1800)
    # bob's job must hold the queue's GPUs first: submitted into the same cycle, alice's 1-GPU
    # job would fit beside her service while bob's 2 GPUs do not (a loaded machine did that).
    r = hub.call("GET", f"/workloads/{busy['id']}?wait=20&state=pending", hub.tokens["bob"])
    assert r.json()["state"] != "pending", r.text
    mine = submit(hub, "alice", name="alice-train", kind="training", resources={"gpu": 1})
    svc = submit(hub, "alice", name="alice-svc", kind="inference", resources={"gpu": 1})
    try:
        asked = time.time()
        code, body = await fetch(jp_fetch, "workloads")
        assert code == 200, body
        assert body["user"] == "alice" and body["this_workload"] is None
        assert asked <= body["now"] <= time.time()          # the server's clock, for relative times
        by_id = {w["id"]: w for w in body["workloads"]}
        assert busy["id"] not in by_id                     # only my own work
        w = by_id[mine["id"]]
        assert w["state"] == "pending" and w["name"] == "alice-train"
        e = w["explanation"]
        # The inference class outranks training: the service is first in the queue.
        assert e["position_in_queue"] == 2 and e["queue_length"] == 2
        assert "guaranteed" in e["reason"] or "limit" in e["reason"], e["reason"]
        # bob's job declares 30 min: alice's ETA comes from the forward simulation.
        assert e["eta_seconds"] is not None and 1700 <= e["eta_seconds"] <= 1800, e
        assert by_id[svc["id"]]["explanation"]["position_in_queue"] == 1
        assert by_id[svc["id"]]["serve_url"] == f"/services/computehub/serve/{svc['id']}/"
        (vision,) = body["queues"]
        assert vision["name"] == "vision"
        assert vision["usage"]["gpu"] == 2 and vision["limit"] == {"gpu": 2}
        assert vision["guaranteed"] == {"gpu": 2} and vision["pending"] == 2 and vision["running"] == 1
    finally:
        cancel_all(hub)


async def test_cancel_logs_and_recently_ended(jp_fetch, hub):
    cancel_all(hub)
    w = submit(hub, "alice", name="to-cancel", kind="batch", resources={"gpu": 1})
    code, body = await fetch(jp_fetch, "workloads", w["id"], "logs")
    assert code == 404 and body["error"] == "not_found" and "no logs recorded" in body["message"], body
    code, body = await fetch(jp_fetch, "workloads", w["id"], method="DELETE")
    assert code == 200 and body["state"] == "cancelled", body
    assert hub.call("GET", f"/workloads/{w['id']}", hub.launcher_token).json()["state"] == "cancelled"
    code, body = await fetch(jp_fetch, "workloads")
    ended = [x for x in body["workloads"] if x["id"] == w["id"]]
    assert ended and ended[0]["state"] == "cancelled" and ended[0]["reason"] == "cancelled by alice"
    # With more history, the panel gets the latest five only, newest first.
    later = [submit(hub, "alice", name=f"later-{i}", kind="batch", resources={"gpu": 1})["id"] for i in range(6)]
    for wid in later:
        assert (await fetch(jp_fetch, "workloads", wid, method="DELETE"))[0] == 200
    code, body = await fetch(jp_fetch, "workloads")
    assert [x["id"] for x in body["workloads"] if x["state"] == "cancelled"] == later[::-1][:5], body
    # Someone else's work is not mine to cancel, and the service does not even admit it exists.
    other = submit(hub, "bob", name="bobs", kind="batch", resources={"gpu": 1})
    code, body = await fetch(jp_fetch, "workloads", other["id"], method="DELETE")
    assert code == 404 and body["error"] == "not_found", body
    assert hub.call("GET", f"/workloads/{other['id']}", hub.launcher_token).json()["state"] != "cancelled"
    code, body = await fetch(jp_fetch, "workloads", w["id"], "logs", params={"tail": "lots"})
    assert code == 400 and "tail" in body["message"]
    code, body = await fetch(jp_fetch, "workloads", w["id"], "logs", params={"after": "-5"})
    assert code == 400 and "after must be a byte offset" in body["message"], body
    # What is new after a byte offset (the panel follows a running job's log this way).
    log = hub.data_dir / "logs" / f"{w['id']}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"epoch 1\nepoch 2\n")
    code, body = await fetch(jp_fetch, "workloads", w["id"], "logs", params={"tail": "1"})
    assert code == 200 and (body["lines"], body["offset"]) == (["epoch 2"], 16), body
    with open(log, "ab") as f:
        f.write(b"epoch 3\n")
    code, body = await fetch(jp_fetch, "workloads", w["id"], "logs", params={"after": "16"})
    assert code == 200 and (body["lines"], body["offset"], body["more"]) == (["epoch 3"], 24, False), body
    code, body = await fetch(jp_fetch, "workloads", w["id"], "logs", params={"after": "99"})
    assert code == 400 and "past the end of the log (24 bytes)" in body["message"], body
    cancel_all(hub)


async def test_hold_and_release_one_of_mine(jp_fetch, hub):
    cancel_all(hub)
    blocker = submit(hub, "bob", name="fills-vision", kind="batch", resources={"gpu": 2})
    w = submit(hub, "alice", name="to-hold", kind="batch", resources={"gpu": 1})
    code, body = await fetch(jp_fetch, "workloads", w["id"], "hold", method="POST", body="{}")
    assert code == 200 and body["state"] == "held" and body["metadata"]["hold"]["by"] == "alice", body
    code, body = await fetch(jp_fetch, "workloads", w["id"], "hold", method="POST", body="{}")
    assert code == 409 and "held already (by alice)" in body["message"], body
    code, body = await fetch(jp_fetch, "workloads", w["id"], "release", method="POST", body="{}")
    assert code == 200 and body["state"] == "pending", body
    code, body = await fetch(jp_fetch, "workloads", blocker["id"], "hold", method="POST", body="{}")
    assert code == 404 and body["error"] == "not_found", body          # bob's: not even there for alice
    with pytest.raises(HTTPClientError) as e:          # only hold and release are passed on
        await jp_fetch("computehub", "workloads", w["id"], "approve", method="POST", body="{}")
    assert e.value.code == 404
    cancel_all(hub)


async def test_change_one_of_mine_after_trying_it(jp_fetch, hub):
    """The panel's Change… form: a dry run says where it would stand, then the change is made."""
    cancel_all(hub)
    blocker = submit(hub, "bob", name="fills-vision", kind="batch", resources={"gpu": 2}, time_limit=600)
    w = submit(hub, "alice", name="to-change", kind="batch", resources={"gpu": 2}, time_limit=7200)
    code, body = await fetch(jp_fetch, "workloads", w["id"], method="PATCH", params={"dry_run": "true"},
                             body=json.dumps({"resources": {"gpu": 1}, "time_limit": 1800}))
    assert code == 200 and body["dry_run"] is True and body["resources"]["gpu"] == 1, body
    assert body["explanation_before"]["state"] == "pending" and body["explanation"]["position"] >= 1, body
    assert hub.call("GET", f"/workloads/{w['id']}", hub.tokens["alice"]).json()["resources"]["gpu"] == 2
    code, body = await fetch(jp_fetch, "workloads", w["id"], method="PATCH", body=json.dumps({"time_limit": 1800}))
    assert code == 200 and body["time_limit"] == 1800 and "dry_run" not in body, body
    code, body = await fetch(jp_fetch, "workloads", w["id"], method="PATCH", body=json.dumps({"time_limit": 3600}))
    assert code == 403 and "only an admin may give workload" in body["message"], body
    code, body = await fetch(jp_fetch, "workloads", w["id"], method="PATCH", body=json.dumps({"queue": "nlp"}))
    assert code == 403 and "nlp" in body["message"], body              # the form offers it; the service decides
    changes = "send any of name, queue, resources, time_limit"
    for query, payload, words in (({}, {"priority": "batch"}, changes), ({}, {}, changes),
                                  ({"dry_run": "maybe"}, {"time_limit": 60}, "dry_run is true or false"),
                                  ({"tasks": "some"}, {"time_limit": 60}, "tasks one or all"),
                                  # the row's state goes through to the service, which judges it
                                  ({"tasks": "all", "state": "running"}, {"time_limit": 60},
                                   "any of pending, held, awaiting_approval")):
        code, body = await fetch(jp_fetch, "workloads", w["id"], method="PATCH", params=query,
                                 body=json.dumps(payload))
        assert code == 400 and words in body["message"], body          # only what the form sends
    code, body = await fetch(jp_fetch, "workloads", blocker["id"], method="PATCH", body=json.dumps({"time_limit": 60}))
    assert code == 404 and body["error"] == "not_found", body          # bob's: not even there for alice
    cancel_all(hub)


@pytest.mark.parametrize("lab_config", [{"api_token": "not-a-token"}])
async def test_a_token_the_service_refuses_is_a_clear_403(jp_fetch, hub, lab_config):
    code, body = await fetch(jp_fetch, "workloads")
    assert code == 403 and body["error"] == "service_denied", body
    assert body["message"].startswith("ComputeHub refused this server's token:"), body


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("lab_config", [{"service_url": f"http://127.0.0.1:{_closed_port()}/services/computehub",
                                         "request_timeout": 5.0}])
async def test_unreachable_service_is_a_clear_503(jp_fetch, hub, lab_config):
    code, body = await fetch(jp_fetch, "workloads")
    assert code == 503 and body["error"] == "service_unreachable", body
    assert "is unreachable" in body["message"] and lab_config["service_url"] in body["message"]
    code, body = await fetch(jp_fetch, "workloads", "abc", method="DELETE")
    assert code == 503 and body["error"] == "service_unreachable"


@pytest.mark.parametrize("lab_config", [{"service_url": ""}])
async def test_not_configured_says_what_to_set(jp_fetch, hub, lab_config):
    code, body = await fetch(jp_fetch, "workloads")
    assert code == 503 and body["error"] == "not_configured" and "COMPUTEHUB_URL" in body["message"], body


async def test_default_service_url_from_the_spawner_environment(jp_configurable_serverapp, monkeypatch, hub):
    from labextension.server import ComputeHubLab

    monkeypatch.setenv("COMPUTEHUB_URL", "http://127.0.0.1:1/services/computehub")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "tok")
    monkeypatch.setenv("JUPYTERHUB_BASE_URL", "/hub-base/")
    c = ComputeHubLab()
    assert (c.service_url, c.api_token, c.public_prefix) == (
        "http://127.0.0.1:1/services/computehub", "tok", "/hub-base/services/computehub/")
    monkeypatch.delenv("COMPUTEHUB_URL")
    # JupyterHub gives a server its own public URL and the hub's; the service hangs off the hub's root.
    monkeypatch.setenv("JUPYTERHUB_PUBLIC_URL", "https://hub.example.org/prefix/user/alice/")
    monkeypatch.setenv("JUPYTERHUB_PUBLIC_HUB_URL", "https://hub.example.org/prefix/hub/")
    assert ComputeHubLab().service_url == "https://hub.example.org/prefix/services/computehub"
    monkeypatch.delenv("JUPYTERHUB_PUBLIC_HUB_URL")
    assert ComputeHubLab().service_url == ""        # not configured: the endpoints say so


async def test_a_look_asks_once_for_every_waiting_workloads_explanation_and_a_row_acts_on_them(
        jp_fetch, hub, monkeypatch):
    """The panel's look asks the service for my live work with each waiting workload's explanation
    (position, reason, ETA) in one request (``explain=true``), not one request per waiting job or
    array row; the row's buttons act on the tasks in one request (array-action)."""
    import labextension.service as service
    cancel_all(hub)
    busy = submit(hub, "bob", name="bob-big", kind="training", resources={"gpu": 2}, time_limit=1800)
    r = hub.call("GET", f"/workloads/{busy['id']}?wait=20&state=pending", hub.tokens["bob"])
    assert r.json()["state"] != "pending", r.text
    sweep = submit(hub, "alice", name="sweep", kind="batch", resources={"gpu": 1}, array="0-9")["tasks"]
    lone = [submit(hub, "alice", name=f"lone-{i}", kind="batch", resources={"gpu": 1})["id"] for i in range(3)]
    deadline = time.monotonic() + 20            # a cycle has placed them all in line
    while not all(w.get("position") for w in hub.call(
            "GET", "/workloads?state=pending&user=alice", hub.tokens["alice"]).json()["workloads"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    asked = []
    call = service.ServiceClient.call

    async def counted(self, method, path, query=None, body=None):
        asked.append(path)
        return await call(self, method, path, query, body)

    monkeypatch.setattr(service.ServiceClient, "call", counted)
    try:
        code, body = await fetch(jp_fetch, "workloads")
        assert code == 200, body
        assert sorted(asked) == ["me", "queues", "workloads", "workloads"], asked
        explained = {w["id"]: w["explanation"] for w in body["workloads"] if "explanation" in w}
        assert set(explained) == {*sweep, *lone}, explained
        for wid, e in explained.items():
            assert e["reason"] and e["position"] >= 1 and "eta_reason" in e, (wid, e)
        assert explained[sweep[0]]["position"] < explained[sweep[1]]["position"]
        # The row's Hold: one request for the tasks in its state.
        code, out = await fetch(jp_fetch, "workloads", sweep[0], "array-action", method="POST",
                                body=json.dumps({"action": "hold", "states": ["pending"]}))
        assert code == 200 and out["tasks"] == sweep and set(out["states"].values()) == {"held"}, out
        code, out = await fetch(jp_fetch, "workloads", sweep[0], "array-action", method="POST",
                                body=json.dumps({"action": "stop"}))
        assert code == 400 and "cancel" in out["message"], out
        code, out = await fetch(jp_fetch, "workloads", busy["id"], "array-action", method="POST",
                                body=json.dumps({"action": "cancel"}))
        assert code == 404, out                                  # bob's: not hers, not even shown
    finally:
        cancel_all(hub)


async def test_my_work_beyond_a_thousand_live_workloads_is_all_there(jp_fetch, hub):
    """A job array of 1,000 tasks and a job beside it: the panel gets both (it asked for the first
    1,000 live workloads only, and the job went missing)."""
    cancel_all(hub)
    try:
        sweep = submit(hub, "alice", name="sweep", kind="batch", resources={"gpu": 1}, array="0-999", hold=True)
        job = submit(hub, "alice", name="after-the-sweep", kind="batch", resources={"gpu": 1}, hold=True)
        code, body = await fetch(jp_fetch, "workloads")
        assert code == 200, body
        ids = {w["id"] for w in body["workloads"]}
        assert job["id"] in ids and set(sweep["tasks"]) <= ids
    finally:
        cancel_all(hub)
