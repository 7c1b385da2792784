"""Helpers for tests that run a real hub with the queued local spawner (real servers)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import sys

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from realhub import RealHub  # noqa: E402

START_TIMEOUT = 5    # seconds; a spawn waits in the queue longer than this and still starts


def spawner_config(hub: RealHub) -> str:
    return f"""
c.JupyterHub.spawner_class = "spawner.local.QueuedSimpleLocalProcessSpawner"
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
c.QueueingMixin.computehub_token = "{hub.launcher_token}"
c.QueueingMixin.gpus = 1
c.QueueingMixin.queue_poll_interval = 0.5
c.Spawner.start_timeout = {START_TIMEOUT}
c.Spawner.http_timeout = 60
c.Spawner.args = {["--allow-root"] if os.getuid() == 0 else []!r}
c.SimpleLocalProcessSpawner.home_dir_template = "{hub.dir / 'home'}/{{username}}"
"""


def server_procs(hub: RealHub) -> dict[str, tuple[int, dict]]:
    """user -> (pid, environment) of the single-user servers of this hub."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)
        if "JUPYTERHUB_USER" in env and str(hub.dir) in env.get("HOME", ""):
            found[env["JUPYTERHUB_USER"]] = (int(entry), env)
    return found


def hub_api(hub, method, path, user, **kw):
    return requests.request(method, f"{hub.url}/hub/api{path}", timeout=kw.pop("timeout", 15),
                            headers={"Authorization": f"token {hub.tokens[user]}"}, **kw)


def server_model(hub, user) -> dict | None:
    r = hub_api(hub, "GET", f"/users/{user}", user)
    r.raise_for_status()
    return r.json()["servers"].get("")


def wait_ready(hub, user, timeout=90.0):
    """Until the user's default server is ready; fails at once if the spawn failed."""
    def ready():
        m = server_model(hub, user)
        if not m or not (m.get("ready") or m.get("pending")):
            raise AssertionError(f"{user}'s spawn failed: {m}\n{hub.tail(6000)}")
        return m.get("ready")
    wait_for(f"{user}'s server", ready, timeout)


def wait_for(what, fn, timeout=60.0, every=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def kill_servers(hub: RealHub) -> dict:
    """SIGKILL the hub's single-user servers that outlived it; returns what was left."""
    left = server_procs(hub)
    for pid, _ in left.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
