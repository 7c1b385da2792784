"""The chart's own output drives a real JupyterHub, its proxy and the ComputeHub service.

helm renders the chart with the hub's API URL and a real PostgreSQL as the database. The
service runs as the rendered Deployment says: its command, its environment (secrets from the
rendered Secret), the config file of the rendered ConfigMap. The hub runs the ConfigMap's hub
side with the tokens the NOTES tell z2jh to pass. Emulated, as no cluster runs here
(/work/shared/TESTING.md): the cluster's DNS name of the service (the hub reaches it on
127.0.0.1), the volume mounts (files in a temporary folder), and the spawner (notebooks would
need the Kubernetes API; none is spawned here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import requests
from chart import CHART, one, pod_spec, render, secret_data
from prometheus_client.parser import text_string_to_metric_families
from realhub import RealHub, free_port

QUEUES = [{"name": "org"},
          {"name": "vision", "parent": "org", "guaranteed": {"gpu": 2}, "groups": ["vision"]}]


class ChartHub(RealHub):
    """A RealHub whose ComputeHub side is the chart's (hub snippet, tokens, service pod)."""

    def __init__(self, workdir: Path, snippet: str, tokens: dict[str, str]):
        super().__init__(workdir)
        self.snippet, self.chart_tokens = snippet, tokens

    def write_config(self) -> Path:
        (self.dir / "computehub_hub_config.py").write_text(self.snippet)
        cfg = self.basics({"vision": ["alice", "bob", "lin"]}) + textwrap.dedent(f"""
            c.JupyterHub.services = [{{"name": "test-admin", "api_token": "{self.admin_token}"}},
                                     {{"name": "nobody", "api_token": "{self.nobody_token}"}}]
            c.JupyterHub.load_roles = [{{"name": "test-admin", "scopes": ["admin:users", "admin:groups", "tokens"],
                                         "services": ["test-admin"]}}]
            # z2jh's hub.extraConfig, as the chart's NOTES give it:
            exec(open("{self.dir / 'computehub_hub_config.py'}").read())
            # The cluster's DNS name of the service is 127.0.0.1 here; no Kubernetes for notebooks.
            for s in c.JupyterHub.services:
                if s["name"] == "computehub":
                    s["url"] = "http://127.0.0.1:{self.service_port}"
            c.JupyterHub.spawner_class = "spawner.local.QueuedSimpleLocalProcessSpawner"
            """)
        path = self.dir / "jupyterhub_config.py"
        path.write_text(cfg)
        return path

    def start(self, timeout: float = 60.0):
        os.environ.update({k: v for k, v in self.chart_tokens.items()})
        try:
            return super().start(timeout)
        finally:
            for k in self.chart_tokens:
                os.environ.pop(k, None)


def service_process(objs, workdir: Path, port: int) -> subprocess.Popen:
    """The service container of the rendered Deployment, as a local process."""
    spec = pod_spec(one(objs, "Deployment", component="service"))
    container = spec["containers"][0]
    secrets = secret_data(objs)
    env = {}
    for e in container["env"]:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        env[e["name"]] = secrets[ref["key"]] if ref else e["value"]
    assert env["JUPYTERHUB_SERVICE_URL"] == f"http://0.0.0.0:{port}"
    env["JUPYTERHUB_SERVICE_URL"] = f"http://127.0.0.1:{port}"      # tests listen on 127.0.0.1 only
    # The mounts: the ConfigMap's files and the cookie secret from the Secret, under workdir.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    etc, data = workdir / "etc", workdir / "data"
    etc.mkdir()
    data.mkdir()
    files = one(objs, "ConfigMap", name="t-computehub")["data"]
    config = json.loads(files["computehub_config.json"])
    assert config["ComputeHubService"]["data_dir"] == "/srv/computehub" and "/srv/computehub" in mounts
    config["ComputeHubService"]["data_dir"] = str(data)
    (etc / "computehub_config.json").write_text(json.dumps(config))
    assert mounts["/srv/computehub/cookie_secret"]["subPath"] == "cookie-secret"
    (data / "cookie_secret").write_text(secrets["cookie-secret"])
    command = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a).replace("/etc/computehub", str(etc))
               for a in container["command"]]
    exe = Path(sys.executable).parent / command[0]
    log = open(workdir / "service.log", "ab")
    return subprocess.Popen([str(exe), *command[1:]], env=dict(os.environ, **env), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, pg_server):
    d = tmp_path_factory.mktemp("chart-hub")
    hub_port, service_port = free_port(), free_port()
    objs = render(d, f"hub.apiUrl=http://127.0.0.1:{hub_port}/hub/api", f"service.port={service_port}",
                  f"database.url={pg_server.create_database()}", "hub.admins={ada}", "hub.notebookWatch=false",
                  "metrics.serviceMonitor.enabled=true",
                  values={"service": {"queues": QUEUES, "cycleInterval": 0.5}})
    secrets = secret_data(objs)
    snippet = one(objs, "ConfigMap", name="t-computehub")["data"]["computehub_hub_config.py"]
    tokens = {"COMPUTEHUB_API_TOKEN": secrets["api-token"], "COMPUTEHUB_SPAWNER_TOKEN": secrets["spawner-token"],
              "COMPUTEHUB_LAUNCHER_TOKEN": secrets["launcher-token"], "COMPUTEHUB_METRICS_TOKEN": secrets["metrics-token"],
              "COMPUTEHUB_INVENTORY_TOKEN": secrets["inventory-token"]}
    hub = ChartHub(d, snippet, tokens)
    hub.hub_port, hub.service_port = hub_port, service_port
    service = service_process(objs, d, service_port)
    try:
        hub.start()
        yield hub, objs
    finally:
        hub.stop()
        os.killpg(service.pid, signal.SIGTERM)
        try:
            service.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
        service.wait(5)


def test_users_reach_the_charts_service_with_its_queues(deployed):
    hub, _ = deployed
    r = hub.call("GET", "/me", hub.tokens["alice"])
    assert r.status_code == 200 and r.json()["name"] == "alice" and r.json()["can_submit"] is True
    queues = {q["name"] for q in hub.call("GET", "/queues", hub.tokens["ada"]).json()["queues"]}
    assert queues >= {"org", "vision"}
    assert hub.call("GET", "/me", hub.nobody_token).status_code == 403


def test_the_charts_tokens_carry_their_scopes_and_no_more(deployed):
    hub, objs = deployed
    secrets = secret_data(objs)
    for key in ("launcher-token", "spawner-token"):
        me = hub.call("GET", "/me", secrets[key]).json()
        assert me["submit_on_behalf"] is True and me["admin"] is False and me["manage_nodes"] is False, key
    inventory = secrets["inventory-token"]
    me = hub.call("GET", "/me", inventory).json()
    assert me["manage_nodes"] is True and me["admin"] is False and me["submit_on_behalf"] is False
    node = {"gpus": 2, "gpu_model": "a100", "cpu": "16", "memory": "64Gi"}
    assert hub.call("PUT", "/nodes/chart-node", inventory, json=node).status_code == 201
    assert hub.call("PATCH", "/nodes/chart-node", inventory, json={"draining": True}).json()["draining"] is True
    r = hub.call("PUT", "/queues/sneaky", inventory, json={"parent": "org"})
    assert r.status_code == 403 and "custom:computehub:admin" in r.json()["message"]
    r = hub.call("POST", "/workloads", inventory, json={"user": "alice", "queue": "vision", "resources": {"gpu": 1}})
    assert r.status_code == 403
    assert hub.call("DELETE", "/nodes/chart-node", inventory).status_code == 200
    # The admins the values name are ComputeHub admins.
    assert hub.call("GET", "/me", hub.tokens["ada"]).json()["admin"] is True
    assert hub.call("GET", "/me", hub.tokens["lin"]).json()["admin"] is False


def test_prometheus_scrapes_what_the_dashboard_plots_with_a_token_good_for_nothing_else(deployed):
    """As the ServiceMonitor says: its path, its bearer token from the Secret; every metric the
    dashboard plots is served."""
    hub, objs = deployed
    endpoint = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
    token = secret_data(objs)[endpoint["authorization"]["credentials"]["key"]]
    assert hub.call("GET", "/workloads", token).status_code == 403
    assert hub.call("PUT", "/nodes/x", token, json={"gpus": 1}).status_code == 403
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    wanted = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"computehub_\w+", t["expr"])}
    r = requests.get(hub.url + endpoint["path"], headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 200, r.text
    served = set()
    for f in text_string_to_metric_families(r.text):
        served |= {f.name} | {s.name for s in f.samples}
        if f.type == "counter":
            served.add(f.name + "_total")
        if f.type == "histogram":
            served |= {f.name + s for s in ("_bucket", "_sum", "_count")}
    assert len(wanted) >= 8 and wanted <= served, wanted - served
