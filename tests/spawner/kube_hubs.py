"""Hubs on the emulated Kubernetes API that several test files share, and what those tests do
with them.

``launcher_hub``: JupyterHub + proxy + the ComputeHub service with its managed launcher driving
the KubeLauncher backend through a kubeconfig; the job controller and garbage collector are
played by tests/spawner/kube_controllers.py. ``spawner_hub``: the same hub spawning notebook
pods with QueuedKubeSpawner, whose kubelet (tests/spawner/kmock_cluster.py's ProcessKubelet) runs
each pod's command as a local process on a loopback pod IP. Emulated in both: the Kubernetes API
(kmock) and the GPU nodes, which the service is told of (``SERVICE`` and the callers' own).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
import localhub  # noqa: E402
from kmock_cluster import KmockCluster, ProcessKubelet  # noqa: E402
from kube_controllers import JobController  # noqa: E402
from kube_profiles import NS, PROFILES  # noqa: E402
from realhub import RealHub, free_port  # noqa: E402

ALL_STATES = ("awaiting_approval", "held", "pending", "admitted", "running", "preempting", "cancelling",
              "reclaiming", "finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")


# ---- the launcher's hub --------------------------------------------------------------------------

@contextlib.contextmanager
def launcher_hub(d: Path, service: str, setup: Callable[[KmockCluster], None] | None = None):
    """A started hub whose launcher runs the KubeLauncher against a fresh emulated API (with the
    job controller); ``service``: the service's config, where ``KUBECONFIG`` stands for the path
    of the kubeconfig. ``setup(cluster)`` runs before the hub starts (objects already there)."""
    cluster = KmockCluster(d).start()
    cluster.controllers.append(JobController(cluster))
    kubeconfig = cluster.write_kubeconfig(d / "kubeconfig", NS)
    hub = RealHub(d, extra_service_config=service.replace("KUBECONFIG", repr(str(kubeconfig))),
                  configure_kwargs="launcher=True")
    yield from _running(hub, cluster, setup)


def _running(hub, cluster, setup):
    """Start ``hub`` on ``cluster`` (``setup(cluster)`` first) and stop both after."""
    hub.cluster = cluster
    try:
        if setup is not None:
            setup(cluster)
        hub.start()
        yield hub
    finally:
        hub.stop()            # the hub deletes its pods first; then the API goes
        cluster.stop()


# ---- the notebook spawner's hub ------------------------------------------------------------------

SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "kube-gpu-1", "gpus": 1, "gpu_model": "a100", "cpu": 16, "memory": "64Gi"},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 1, "cpu": 8, "memory": "32Gi"}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "guaranteed": {"cpu": 4, "memory": "8Gi"}, "groups": ["nlp"]},
]
"""


def spawner_config(hub: RealHub, port: int) -> str:
    return f"""
c.JupyterHub.spawner_class = "spawner.kube.QueuedKubeSpawner"
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 5}}
c.QueueingMixin.computehub_token = "{hub.launcher_token}"
c.QueueingMixin.queue_poll_interval = 0.5
c.KubeSpawner.namespace = "{NS}"
c.KubeSpawner.port = {port}
c.KubeSpawner.image = "quay.io/jupyter/base-notebook:2025-01-06"
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.Spawner.args = {["--allow-root"] if os.getuid() == 0 else []!r}
c.KubeSpawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = "1Gi"
c.KubeSpawner.volumes = [{{"name": "home", "persistentVolumeClaim": {{"claimName": "{{pvc_name}}"}}}}]
c.KubeSpawner.volume_mounts = [{{"name": "home", "mountPath": "/home/jovyan"}}]
c.KubeSpawner.profile_list = {PROFILES!r}
"""


def pod_env(pod: dict, env: dict, ip: str) -> dict:
    """The kubelet gives the pod its IP: the server listens there, on the pod's port."""
    url = urlparse(env["JUPYTERHUB_SERVICE_URL"])
    env["JUPYTERHUB_SERVICE_URL"] = url._replace(netloc=f"{ip}:{url.port}").geturl()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    return env


@contextlib.contextmanager
def spawner_hub(d: Path, extra_spawner_config: str = "", setup: Callable[[KmockCluster], None] | None = None):
    """A started hub spawning with QueuedKubeSpawner (``spawner_config``, then
    ``extra_spawner_config``) against a fresh emulated API with a ProcessKubelet; $KUBECONFIG
    points at it meanwhile. ``setup(cluster)`` runs before the hub starts."""
    cluster = KmockCluster(d).start()
    cluster.kubelet = ProcessKubelet(cluster, d, env_overrides=pod_env)
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cluster.write_kubeconfig(d / "kubeconfig", NS))
    hub = RealHub(d, extra_service_config=SERVICE)
    hub.spawner_config = spawner_config(hub, free_port()) + extra_spawner_config
    try:
        yield from _running(hub, cluster, setup)
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old


def hub_api(hub, method, path, user, **kw):
    return requests.request(method, f"{hub.url}/hub/api{path}", timeout=kw.pop("timeout", 30),
                            headers={"Authorization": f"token {hub.tokens[user]}"}, **kw)


def wait_for(what, fn, timeout=90.0, every=0.2):
    return localhub.wait_for(what, fn, timeout, every)


def server(hub, user) -> dict | None:
    r = hub_api(hub, "GET", f"/users/{user}", user)
    r.raise_for_status()
    return r.json()["servers"].get("")


def wait_ready(hub, user, timeout=120.0):
    def ready():
        m = server(hub, user)
        if not m or not (m.get("ready") or m.get("pending")):
            raise AssertionError(f"{user}'s spawn failed: {m}\n{hub.tail(6000)}")
        return m.get("ready")
    wait_for(f"{user}'s server", ready, timeout)


def spawn(hub, user, options) -> requests.Response:
    r = hub_api(hub, "POST", f"/users/{user}/server", user, json=options)
    assert r.status_code in (201, 202), r.text
    return r


def stop(hub, user):
    r = hub_api(hub, "DELETE", f"/users/{user}/server", user)
    assert r.status_code in (202, 204), r.text
    wait_for(f"{user}'s server to stop", lambda: not server(hub, user), 90)


def newest_workload(hub, user) -> dict | None:
    states = "&".join(f"state={s}" for s in ALL_STATES)
    r = hub.call("GET", f"/workloads?user={user}&kind=notebook&{states}", hub.launcher_token)
    r.raise_for_status()
    ws = r.json()["workloads"]
    return max(ws, key=lambda w: w["submitted_at"]) if ws else None


def workload(hub, wid) -> dict:
    return hub.call("GET", f"/workloads/{wid}", hub.launcher_token).json()


def user_pods(hub, user) -> list[dict]:
    return [p for p in hub.cluster.objects("pods", NS)
            if p["metadata"].get("annotations", {}).get("hub.jupyter.org/username") == user]
