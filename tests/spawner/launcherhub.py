"""Helpers for tests that run a real hub + proxy + ComputeHub service with its managed local
launcher (``configure_jupyterhub(..., launcher=True)``) running jobs as real local processes.
Emulated: the GPUs (a declared simulated node "local" with 2 GPUs; jobs see their indices in
CUDA_VISIBLE_DEVICES). The hub users have no OS accounts here, so jobs run as the launcher's
own user (demo mode)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from localhub import wait_for  # noqa: E402,F401  (re-exported for the launcher tests)
from realhub import RealHub  # noqa: E402

SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "local", "gpus": 2, "gpu_model": "sim", "cpu": 8, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 2}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "groups": ["nlp"]},
]
c.LocalLauncher.allowed_roots = [ROOT]
c.LocalLauncher.allow_launcher_user = True      # the hub users have no OS accounts (demo mode)
c.LauncherApp.poll_interval = 0.3
c.LauncherApp.preempt_grace = 20
c.LauncherApp.max_restarts = 2
"""


def launcher_hub(tmp: Path, extra_service_config: str = "") -> tuple[RealHub, Path]:
    """A hub with the managed launcher; notebook servers (no GPU) get homes under work/.
    ``extra_service_config`` comes after SERVICE (later settings win)."""
    work = tmp / "work"
    work.mkdir()
    hub = RealHub(tmp, extra_service_config=SERVICE.replace("ROOT", repr(str(work))) + extra_service_config,
                  configure_kwargs="launcher=True")
    hub.spawner_config = f"""
c.JupyterHub.spawner_class = "spawner.local.QueuedSimpleLocalProcessSpawner"
c.QueueingMixin.computehub_token = "{hub.launcher_token}"
c.QueueingMixin.gpus = 0
c.Spawner.args = {["--allow-root"] if os.getuid() == 0 else []!r}
c.Spawner.http_timeout = 60
c.SimpleLocalProcessSpawner.home_dir_template = "{work}/{{username}}"
"""
    return hub, work


def launcher_pids(hub: RealHub) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"spawner.launcher_app.*{hub.data_dir}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def kill_jobs(hub: RealHub) -> None:
    """Never leave a job behind: the launcher's records name every process group it started."""
    for pid in launcher_pids(hub):
        os.kill(pid, signal.SIGKILL)
    state = hub.data_dir / "launcher"
    for rec in state.glob("*.json") if state.exists() else ():
        for w in json.loads(rec.read_text())["workers"]:
            try:
                os.killpg(w["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@contextlib.contextmanager
def running_launcher_hub(tmp: Path, extra_service_config: str = ""):
    """``launcher_hub`` started, its launcher up; stopped with every job it ran."""
    hub, work = launcher_hub(tmp, extra_service_config)
    try:
        hub.start()
        wait_for("the launcher", lambda: launcher_pids(hub), 60)
        yield hub, work
    finally:
        hub.stop()
        kill_jobs(hub)


def submit(hub, user, command, work, kind="training", gpus=1, **extra):
    body = {"kind": kind, "queue": "vision", "resources": {"gpu": gpus},
            "metadata": {"job": {"command": command, "workdir": str(work)}}, **extra}
    r = hub.call("POST", "/workloads", hub.tokens[user], json=body)
    assert r.status_code == 201, r.text
    return r.json()


def get(hub, wid, user="ada"):
    r = hub.call("GET", f"/workloads/{wid}", hub.tokens[user])
    assert r.status_code == 200, r.text
    return r.json()


def state_is(hub, wid, *states):
    w = get(hub, wid)
    return w if w["state"] in states else None


def py(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]
