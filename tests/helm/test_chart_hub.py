"""The chart's own output runs ComputeHub against a real JupyterHub, its proxy and PostgreSQL.

helm renders the chart with the hub's API URL and a real PostgreSQL as the database. Its three
pods run as local processes as the rendered Deployments say (tests/helm/pods.py): their commands,
their environments (secrets from the rendered Secret), the config files of the rendered
ConfigMap. The hub runs the ConfigMap's hub side with the tokens the NOTES tell z2jh to pass.
Emulated, as no cluster runs on the test machines: the Kubernetes API (kmock, with a
test Job controller), the pods' service accounts (a kubeconfig to it), the cluster's DNS name of
the service (127.0.0.1), the spawner (notebooks would need KubeSpawner's reflectors; none is
spawned here), and the Prometheus Operator's translation of the ServiceMonitor and the
PrometheusRule for the real Prometheus that scrapes the service (tests/helm/prometheus.py).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests
from chart import CHART, NAMESPACE, one, render, secret_data
from pods import container_process, stop
from promql import PROMETHEUS_OWN, metric_names, selectors, served_names
from realhub import RealHub, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spawner"))
from kmock_cluster import KmockCluster  # noqa: E402
from kube_controllers import JobController, patch_status  # noqa: E402
from localhub import wait_for  # noqa: E402

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


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, pg_server):
    d = tmp_path_factory.mktemp("chart-hub")
    cluster = KmockCluster(d).start()
    cluster.controllers.append(JobController(cluster))
    kubeconfig = str(cluster.write_kubeconfig(d / "kubeconfig", NAMESPACE))
    hub_port, service_port = free_port(), free_port()
    objs = render(d, f"hub.apiUrl=http://127.0.0.1:{hub_port}/hub/api", f"service.port={service_port}",
                  f"database.url={pg_server.create_database()}", "hub.admins={ada}", "hub.notebookWatch=false",
                  "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                  values={"service": {"queues": QUEUES, "cycleInterval": 0.5}, "inventory": {"interval": 0.5}})
    secrets = secret_data(objs)
    snippet = one(objs, "ConfigMap", name="t-computehub")["data"]["computehub_hub_config.py"]
    tokens = {"COMPUTEHUB_API_TOKEN": secrets["api-token"], "COMPUTEHUB_SPAWNER_TOKEN": secrets["spawner-token"],
              "COMPUTEHUB_LAUNCHER_TOKEN": secrets["launcher-token"], "COMPUTEHUB_METRICS_TOKEN": secrets["metrics-token"],
              "COMPUTEHUB_INVENTORY_TOKEN": secrets["inventory-token"]}
    hub = ChartHub(d, snippet, tokens)
    hub.hub_port, hub.service_port = hub_port, service_port
    hub.cluster = cluster
    # The cluster's DNS name of the service, and 0.0.0.0 (tests listen on 127.0.0.1 only).
    hosts = {f"t-computehub.{NAMESPACE}.svc": "127.0.0.1", "0.0.0.0": "127.0.0.1"}
    # The pods' service accounts: a kubeconfig to the emulated API server.
    procs = [container_process(objs, "service", d, hosts=hosts),
             container_process(objs, "launcher", d, hosts=hosts, config={
                 "launcher_config.json": {"KubeLauncher": {"kubeconfig": kubeconfig},
                                          "LauncherApp": {"poll_interval": 0.3}}}),
             container_process(objs, "inventory", d, hosts=hosts, config={
                 "inventory_config.json": {"InventoryApp": {"kubeconfig": kubeconfig}}})]
    assert (d / "service" / "srv_computehub" / "cookie_secret").read_text() == secrets["cookie-secret"]
    try:
        hub.start()
        yield hub, objs
    finally:
        hub.stop()
        for p in procs:
            stop(p)
        cluster.stop()


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


def test_prometheus_scrapes_what_the_dashboard_plots_and_the_alerts_read(deployed):
    """As the ServiceMonitor says: its path, its bearer token from the Secret; every metric the
    dashboard plots and the PrometheusRule's alerts read is served, and the clients the alerts
    watch for silence are the chart's launcher and inventory as the service sees them."""
    hub, objs = deployed
    endpoint = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
    token = secret_data(objs)[endpoint["authorization"]["credentials"]["key"]]
    assert hub.call("GET", "/workloads", token).status_code == 403
    assert hub.call("PUT", "/nodes/x", token, json={"gpus": 1}).status_code == 403
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    plotted = {m for p in dashboard["panels"] for t in p.get("targets", ()) for m in metric_names(t["expr"])}
    alerts = [r for g in one(objs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    read = {m for r in alerts for m in metric_names(r["expr"])} - PROMETHEUS_OWN
    silent = {eq["client"] for r in alerts for _, eq in selectors(r["expr"]) if "client" in eq}

    def scrape():
        r = requests.get(hub.url + endpoint["path"], headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert r.status_code == 200, r.text
        return r.text
    served = served_names(scrape())
    assert len(plotted) >= 15 and plotted <= served, plotted - served
    assert len(read) >= 8 and read <= served, read - served
    # Both poll the service (the inventory every 0.5 s here, the launcher every 0.3 s).
    assert silent == {"computehub-launcher", "computehub-inventory"}
    seen = wait_for("the launcher and the inventory call", lambda: (text := scrape()) and all(
        f'computehub_client_last_request_timestamp_seconds{{client="{c}"}}' in text for c in silent))
    assert seen


def kube_node(name: str, gpus: int) -> dict:
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_cluster_node_runs_a_job_through_the_charts_inventory_and_launcher(deployed):
    """The inventory pod registers the cluster's node; alice's training job is admitted onto it and
    the launcher pod runs it as a Job in the release namespace, as the chart configured it."""
    from kube_controllers import create
    hub, objs = deployed
    hub.cluster.run(create(hub.cluster, "/api/v1/nodes", kube_node("gpu-node-1", 4)))
    node = wait_for("the inventory registers the node", lambda: {
        n["name"]: n for n in hub.call("GET", "/nodes", hub.tokens["ada"]).json()["nodes"]}.get("gpu-node-1"))
    assert node["gpus"] == 4 and node["gpu_model"] == "a100" and node["labels"]["computehub/source"] == "kubernetes"
    body = {"kind": "training", "queue": "vision", "resources": {"gpu": 1, "cpu": 2, "memory": "8Gi"},
            "metadata": {"job": {"command": ["python", "train.py"]}}}
    r = hub.call("POST", "/workloads", hub.tokens["alice"], json=body)
    assert r.status_code == 201, r.text
    wid = r.json()["id"]

    def job():
        jobs = [o for o in hub.cluster.objects("jobs", NAMESPACE)
                if o["metadata"]["labels"].get("computehub/workload") == wid]
        return jobs[0] if jobs else None
    j = wait_for("the launcher's Job", job)
    spec = j["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0].get("env", [])}
    assert spec["nodeName"] == "gpu-node-1" and spec["priorityClassName"] == "computehub-training"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert env["COMPUTEHUB_URL"] == f"http://t-computehub.{NAMESPACE}.svc:{hub.service_port}/services/computehub"
    running = wait_for("running", lambda: (w := hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json())
                       ["state"] == "running" and w)
    assert running["placement"][0]["node"] == "gpu-node-1"
    hub.cluster.run(patch_status(hub.cluster, f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/ch-{wid}/status",
                                 {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}))
    done = wait_for("finished", lambda: (w := hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json())
                    ["state"] in ("finished", "failed") and w)
    assert done["state"] == "finished" and done["exit_code"] == 0, done
    hub.cluster.check()


def test_helm_test_checks_the_service_through_the_hubs_auth(deployed, tmp_path):
    """The chart's `helm test` pod, run as rendered: it succeeds against the working install
    (listing the node the inventory registered) and fails when its token is refused."""
    hub, objs = deployed
    hosts = {f"t-computehub.{NAMESPACE}.svc": "127.0.0.1"}
    check = container_process(objs, "test", tmp_path, hosts=hosts)
    assert check.wait(60) == 0, (tmp_path / "test.log").read_text()
    out = (tmp_path / "test.log").read_text()
    assert out.splitlines()[0].split()[0] == "NODE" and "gpu-node-1" in out, out
    bad = [dict(o, data={**o["data"], "metrics-token": "YmFk"}) if o["kind"] == "Secret" else o for o in objs]
    refused = container_process(bad, "test", tmp_path / "bad", hosts=hosts)
    assert refused.wait(60) != 0
    assert "computehub: error:" in (tmp_path / "bad" / "test.log").read_text()


def test_a_real_prometheus_scrapes_the_service_and_its_alerts_fire_on_what_it_serves(deployed, tmp_path):
    """Prometheus itself, configured as the Prometheus Operator would from the ServiceMonitor (its
    path, port and bearer token) and the PrometheusRule (rendered here with every ``for`` at 0s,
    so that an alert fires on the first evaluation that finds its condition): the scrape is up,
    every rule evaluates without an error, none of the alerts about the service, its database,
    its scheduler or its clients fires on this working install, and GPUs left idle while GPU
    work waits raise ComputeHubGPUsIdleWhileWorkWaits until that work is withdrawn.
    Emulated: the Operator's translation (tests/helm/prometheus.py)."""
    from kube_controllers import create
    from prometheus import Prometheus, scrape_config
    hub, objs = deployed
    fors = ("serviceDown", "databaseDown", "schedulingStalled", "cycleErrors", "hubUnreachable",
            "owedWorkWaiting", "idleWhileWaiting", "stopOverdue", "clientSilent")
    rules = one(render(tmp_path, "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                       *[f"metrics.prometheusRule.for.{f}=0s" for f in fors]), "PrometheusRule")
    monitor, service = one(objs, "ServiceMonitor"), one(objs, "Service", component="service")
    token = secret_data(objs)[monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["key"]]
    scrape = scrape_config(monitor, service, NAMESPACE, token, f"127.0.0.1:{hub.service_port}", tmp_path)
    prom = Prometheus(tmp_path, scrape, rules["spec"]["groups"], free_port())
    try:
        (target,) = wait_for("the scrape", lambda: [t for t in prom.targets() if t["health"] == "up"], 30)
        assert target["labels"] == {"instance": f"127.0.0.1:{hub.service_port}", "job": "t-computehub",
                                    "namespace": NAMESPACE}, target
        evaluated = wait_for("every rule evaluated", lambda: (r := prom.rules()) and all(
            x.get("lastEvaluation", "").startswith("20") and x["evaluationTime"] > 0 for x in r) and r, 30)
        assert len(evaluated) == 12 and all(r["health"] == "ok" for r in evaluated), \
            [(r["name"], r.get("lastError")) for r in evaluated if r["health"] != "ok"]
        wait_for("a few more evaluations", lambda: time.sleep(3) or True)
        trouble = {"ComputeHubServiceDown", "ComputeHubDatabaseUnavailable", "ComputeHubSchedulingStalled",
                   "ComputeHubSchedulingCyclesFailing", "ComputeHubHubUnreachable", "ComputeHubLauncherSilent",
                   "ComputeHubInventorySilent", "ComputeHubWorkNotStopping", "ComputeHubMailFailing"}
        assert not trouble & set(prom.firing()), prom.firing()
        # Every dashboard panel's query runs on the live series without an error (vector matching
        # errors, for one, show only once there are series to match).
        dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
        queries = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", ())]
        failed = [(title, r.status_code, r.text[:200]) for title, expr in queries
                  if (r := requests.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=10))
                  .status_code != 200 or r.json()["status"] != "success"]
        assert len(queries) >= 15 and not failed, failed
        database = prom.api("query", query=next(e for t, e in queries if "Database up" in t))["result"]
        assert [float(x["value"][1]) for x in database] == [1.0], database

        # Two idle GPUs on a node of their own; alice's second 1-GPU job waits at her queue's limit.
        hub.cluster.run(create(hub.cluster, "/api/v1/nodes", kube_node("idle-node", 2)))
        wait_for("the inventory registers the node", lambda: any(
            n["name"] == "idle-node" for n in hub.call("GET", "/nodes", hub.tokens["ada"]).json()["nodes"]))
        r = hub.call("PUT", "/queues/capped", hub.tokens["ada"], json={"parent": "org", "groups": ["vision"],
                                                                       "limit": {"gpu": 1}})
        assert r.status_code in (200, 201), r.text
        jobs = []
        for _ in range(2):
            r = hub.call("POST", "/workloads", hub.tokens["alice"], json={
                "kind": "batch", "queue": "capped", "resources": {"gpu": 1},
                "metadata": {"job": {"command": ["true"]}}})
            assert r.status_code == 201, r.text
            jobs.append(r.json()["id"])
        wait_for("one admitted, one waiting", lambda: sorted(
            hub.call("GET", f"/workloads/{w}", hub.tokens["alice"]).json()["state"] for w in jobs) in (
            ["admitted", "pending"], ["pending", "running"]))
        alert = wait_for("the idle-GPU alert", lambda: prom.firing().get("ComputeHubGPUsIdleWhileWorkWaits"), 30)
        assert alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["summary"].endswith("GPUs idle while work waits for GPUs"), alert
        assert int(alert["annotations"]["summary"].split()[0]) >= 1, alert      # idle-node keeps one
        for w in jobs:
            assert hub.call("DELETE", f"/workloads/{w}", hub.tokens["alice"]).status_code in (200, 202)
        wait_for("the alert resolved", lambda: "ComputeHubGPUsIdleWhileWorkWaits" not in prom.firing(), 30)
    finally:
        prom.stop()
