"""Queued notebook spawns, end to end with the local twin (issue 4, "Must show").

A real JupyterHub + configurable-http-proxy + the ComputeHub service, and the
real QueuedSimpleLocalProcessSpawner starting real jupyterhub-singleuser
servers. Emulated: the one GPU (a declared simulated node, "local", 1 GPU), so
"the server got GPU 0" is checked through CUDA_VISIBLE_DEVICES in the server
process's environment (/proc/<pid>/environ).

alice and bob (group vision) may run 1-GPU notebooks in queue "vision"
(guarantee 1 GPU; notebooks are interactive and run only inside guarantee).
alice gets the GPU; bob's spawn progress says "position 1" with a reason and
outlives start_timeout while queued; when alice stops, bob starts by himself;
lin's spawn, cancelled while queued, withdraws its queue entry.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from realhub import RealHub  # noqa: E402
from localhub import (  # noqa: E402
    START_TIMEOUT, hub_api, server_model, server_procs, spawner_config, wait_for, wait_ready,
)

import jupyter_server  # noqa: E402,F401 - runs the single-user servers (extra 'hub'); missing = a loud failure

SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "local", "gpus": 1, "gpu_model": "sim", "cpu": 8, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 1}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "groups": ["nlp"]},
]
"""


def workloads(hub, user) -> list[dict]:
    r = hub.call("GET", f"/workloads?user={user}&kind=notebook", hub.launcher_token)
    r.raise_for_status()
    return r.json()["workloads"]


def latest(hub, user) -> dict | None:
    """The user's newest live (not ended) notebook workload."""
    ws = workloads(hub, user)
    return max(ws, key=lambda w: w["submitted_at"]) if ws else None


class ProgressReader(threading.Thread):
    """Reads a spawn's SSE progress stream into ``events`` until it ends."""

    def __init__(self, hub, user):
        super().__init__(daemon=True)
        self.hub, self.user, self.events = hub, user, []

    def run(self):
        with hub_api(self.hub, "GET", f"/users/{self.user}/server/progress", self.user,
                     stream=True, timeout=120) as r:
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    self.events.append(json.loads(line[5:]))

    def messages(self) -> list[str]:
        return [e.get("message", "") for e in list(self.events)]


@pytest.fixture
def qhub(tmp_path):
    h = RealHub(tmp_path, extra_service_config=SERVICE)
    h.spawner_config = spawner_config(h)
    try:
        h.start()
        yield h
    finally:
        leftovers = server_procs(h)
        h.stop()
        for pid, _ in server_procs(h).values():   # the hub stops servers at shutdown; be sure
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not server_procs(h), f"single-user servers left behind: {leftovers}"


def test_second_user_queues_then_starts_and_cancel_withdraws(qhub):
    hub = qhub
    # alice gets the only GPU.
    r = hub_api(hub, "POST", "/users/alice/server", "alice")
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice")
    pid, env = server_procs(hub)["alice"]
    wa = latest(hub, "alice")
    assert wa["state"] == "running" and wa["placement"] == [{"node": "local", "gpus": [0]}], wa
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["COMPUTEHUB_WORKLOAD_ID"] == wa["id"]
    assert env["COMPUTEHUB_URL"].endswith("/services/computehub")

    # bob queues behind her: the progress stream says where he stands and why.
    t0 = time.time()
    r = hub_api(hub, "POST", "/users/bob/server", "bob")
    assert r.status_code == 202, r.text
    reader = ProgressReader(hub, "bob")
    reader.start()
    msg = wait_for("bob's queue position in the progress stream",
                   lambda: next((m for m in reader.messages() if "position 1" in m), None), 30)
    assert msg.startswith("Queued: position 1 in vision, ETA"), msg
    reason = msg.split(" — ", 1)[1]
    assert reason and "waiting for the next scheduling cycle" not in reason, msg
    wb = latest(hub, "bob")
    assert wb["state"] == "pending" and wb["kind"] == "notebook", wb

    # Queue time does not count against start_timeout: bob is still waiting after it.
    time.sleep(max(0.0, START_TIMEOUT + 2 - (time.time() - t0)))
    assert (server_model(hub, "bob") or {}).get("pending") == "spawn"
    assert latest(hub, "bob")["state"] == "pending"

    # alice stops: her GPU returns and bob's server starts without anything else.
    r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
    assert r.status_code in (202, 204), r.text
    wait_ready(hub, "bob")
    assert hub.call("GET", f"/workloads/{wa['id']}", hub.launcher_token).json()["state"] == "finished"
    procs = server_procs(hub)
    assert "alice" not in procs
    assert procs["bob"][1]["CUDA_VISIBLE_DEVICES"] == "0"
    assert latest(hub, "bob")["state"] == "running"
    reader.join(30)
    msgs = reader.messages()
    assert any(m.startswith("Admitted: local GPU 0") for m in msgs), msgs
    assert reader.events and reader.events[-1].get("ready") is True, reader.events

    # lin (vision) spawns while bob holds the GPU, then cancels while queued: withdrawn.
    r = hub_api(hub, "POST", "/users/lin/server", "lin")
    assert r.status_code == 202, r.text
    wl = wait_for("lin's queued workload",
                  lambda: (lambda w: w if w and w["state"] == "pending" else None)(latest(hub, "lin")), 30)
    r = hub_api(hub, "DELETE", "/users/lin/server", "lin")
    assert r.status_code in (202, 204), r.text
    wait_for("lin's withdrawal", lambda: hub.call("GET", f"/workloads/{wl['id']}", hub.launcher_token)
             .json()["state"] == "cancelled", 30)
    wait_for("lin's spawn to end", lambda: not (server_model(hub, "lin") or {}).get("pending"), 30)
    assert "lin" not in server_procs(hub)

    # bob stops: the allocation is released and the GPU is free again.
    r = hub_api(hub, "DELETE", "/users/bob/server", "bob")
    assert r.status_code in (202, 204), r.text
    wait_for("bob's workload to finish", lambda: hub.call("GET", f"/workloads/{wb['id']}", hub.launcher_token)
             .json()["state"] == "finished", 30)
    node = hub.call("GET", "/nodes/local", hub.tokens["ada"])
    assert node.status_code == 200 and node.json()["free_gpus"] == [0], node.text
    wait_for("bob's server process to exit", lambda: "bob" not in server_procs(hub), 30)


def test_queue_message_wording():
    from spawner.queueing import queue_message
    w = {"state": "pending", "queue": "vision",
         "explanation": {"position_in_queue": 2, "eta_seconds": 290, "reason": "vision uses 1/1 guaranteed GPUs"}}
    assert queue_message(w) == "Queued: position 2 in vision, ETA ~5 min — vision uses 1/1 guaranteed GPUs"
    w["explanation"]["eta_earliest"] = True      # it would start on borrowed GPUs: a lower bound
    assert queue_message(w) == "Queued: position 2 in vision, ETA ≥ 5 min — vision uses 1/1 guaranteed GPUs"
    w["explanation"]["eta_seconds"] = None
    assert "ETA unknown" in queue_message(w)
    assert queue_message({"state": "awaiting_approval", "queue": "nlp", "reason": "above 6 GPUs"}) \
        == "Waiting for an admin's approval in nlp — above 6 GPUs"
