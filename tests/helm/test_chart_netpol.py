"""The NetworkPolicies around users' job pods (helm/computehub/templates/networkpolicy-jobs.yaml
and the per-workload policy spawner/kube_manifests.py makes), read by tests/helm/netpol.py.

No cluster or CNI can run here: the chart is rendered by the real helm, the launcher's manifests
are the real ``KubeLauncher.manifests`` configured by the chart's own launcher config, and the
policies are evaluated as the NetworkPolicy API defines them. Pods other than ComputeHub's (the
hub, the proxy, notebooks, kube-dns) carry the labels z2jh and QueuedKubeSpawner give them.
"""

from __future__ import annotations

import json

import pytest
from chart import NAMESPACE, ChartError, one, render, z2jh_values
from kubernetes_validate import validate
from netpol import Endpoint, allowed, outside, selects

K8S_VERSION = "1.33.0"
METADATA = "169.254.169.254"


def workload(wid: str, user: str, kind: str = "training", workers: int = 1, port: int | None = None) -> dict:
    job = {"command": ["python", "run.py"], **({"port": port} if port else {})}
    return {"id": wid, "user": user, "queue": "vision", "kind": kind, "priority": kind, "workers": workers,
            "resources": {"gpu": 1}, "placement": [{"node": "gpu-1", "gpus": [0]}] * workers,
            "metadata": {"job": job}, "admitted_at": 1000.0}


def launcher(objs, tmp_path):
    """The real KubeLauncher as the chart configures it."""
    from spawner.launch_kube import KubeLauncher
    from spawner.launcher_app import LauncherApp
    (tmp_path / "l.json").write_text(one(objs, "ConfigMap", name="t-computehub")["data"]["launcher_config.json"])
    app = LauncherApp(computehub_url="http://x/services/computehub", token="t")
    app.load_config_file(str(tmp_path / "l.json"))
    return KubeLauncher(parent=app)


def pods_of(manifests: list[dict], ip: str) -> Endpoint:
    """A pod of the workload's Job or Deployment: its template's labels and named ports."""
    main = next(m for m in manifests if m["kind"] in ("Job", "Deployment"))
    t = main["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for c in t["spec"]["containers"] for p in c.get("ports") or []}
    return Endpoint(labels=t["metadata"]["labels"], namespace=main["metadata"]["namespace"], ip=ip, ports=ports)


class Cluster:
    """The chart's policies, the launcher's for two users' work, and the pods around them."""

    def __init__(self, objs, tmp_path):
        self.objs = objs
        kl = launcher(objs, tmp_path)
        self.made = {w["id"]: kl.manifests(w, None) for w in (
            workload("wa1", "alice", workers=2), workload("wa2", "alice", "inference", port=8000),
            workload("wb1", "bob", workers=2), workload("wb2", "bob", "batch"))}
        self.policies = [{**o, "metadata": {"namespace": NAMESPACE, **o["metadata"]}}   # helm's namespace
                         for o in objs if o["kind"] == "NetworkPolicy"] + [
            m for ms in self.made.values() for m in ms if m["kind"] == "NetworkPolicy"]
        svc = one(objs, "Deployment", component="service")
        self.service = Endpoint(svc["spec"]["template"]["metadata"]["labels"], NAMESPACE, "10.0.0.10",
                                {"http": svc["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]})
        pg = one(objs, "StatefulSet")
        self.postgresql = Endpoint(pg["spec"]["template"]["metadata"]["labels"], NAMESPACE, "10.0.0.11",
                                   {"postgresql": 5432})
        self.train0, self.train1 = pods_of(self.made["wa1"], "10.0.1.1"), pods_of(self.made["wa1"], "10.0.1.2")
        self.serve = pods_of(self.made["wa2"], "10.0.1.3")
        self.bob_train, self.bob_batch = pods_of(self.made["wb1"], "10.0.2.1"), pods_of(self.made["wb2"], "10.0.2.2")
        z2jh = {"app": "jupyterhub", "release": "jhub"}
        self.hub = Endpoint({**z2jh, "component": "hub"}, NAMESPACE, "10.0.0.2", {"http": 8081})
        self.proxy = Endpoint({**z2jh, "component": "proxy"}, NAMESPACE, "10.0.0.3", {"http": 8000})
        self.notebook = {u: Endpoint({**z2jh, "component": "singleuser-server", "computehub/user": u,
                                      "computehub/workload": f"n-{u}"}, NAMESPACE, ip, {"notebook-port": 8888})
                         for u, ip in (("alice", "10.0.3.1"), ("bob", "10.0.3.2"))}
        self.dns = Endpoint({"k8s-app": "kube-dns"}, "kube-system", "10.0.4.1", {"dns": 53})

    def jobs(self) -> list[Endpoint]:
        return [self.train0, self.train1, self.serve, self.bob_train, self.bob_batch]

    def may(self, src, dst, port, protocol="TCP") -> bool:
        return allowed(self.policies, src, dst, port, protocol)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("netpol")
    return Cluster(render(d), d)


def jobs_policy(objs) -> dict:
    return one(objs, "NetworkPolicy", name="t-computehub-jobs")


def test_the_jobs_policy_selects_every_pod_the_launcher_makes_and_nothing_else(cluster):
    selector = jobs_policy(cluster.objs)["spec"]["podSelector"]
    assert {m["kind"] for ms in cluster.made.values() for m in ms} >= {"Job", "Deployment", "NetworkPolicy"}
    for pod in cluster.jobs():
        assert selects(selector, pod.labels), pod.labels
    for pod in [cluster.service, cluster.postgresql, cluster.hub, cluster.proxy, *cluster.notebook.values()]:
        assert not selects(selector, pod.labels), pod.labels
    chart_pods = [o["spec"]["template"]["metadata"]["labels"] for o in cluster.objs
                  if o["kind"] in ("Deployment", "StatefulSet")]
    assert chart_pods and not any(selects(selector, labels) for labels in chart_pods)
    # The launcher's own policy per workload selects that workload's pods alone.
    for wid, ms in cluster.made.items():
        own = one(ms, "NetworkPolicy")
        assert own["metadata"]["name"] == f"ch-{wid}" and own["metadata"]["namespace"] == NAMESPACE
        assert [p for p in cluster.jobs() if selects(own["spec"]["podSelector"], p.labels)] == \
            [p for p in cluster.jobs() if p.labels["computehub/workload"] == wid]
        validate(own, K8S_VERSION, strict=True)


def test_job_pods_admit_their_own_workload_and_the_serve_proxy_only(cluster):
    c = cluster
    # A workload's pods reach each other on any port: rendezvous (29500) and NCCL's own.
    assert c.may(c.train1, c.train0, 29500) and c.may(c.train0, c.train1, 41000)
    assert c.may(c.bob_train, pods_of(c.made["wb1"], "10.0.2.9"), 29500)
    # The service's serve proxy (owner-only) reaches an inference pod's port, nothing else.
    assert c.may(c.service, c.serve, 8000)
    assert not c.may(c.service, c.serve, 9000) and not c.may(c.service, c.train0, 29500)
    # Nobody else: other users' jobs and notebooks, the owner's own notebook, the hub, the proxy.
    for src in [c.bob_train, c.bob_batch, c.notebook["bob"], c.notebook["alice"], c.hub, c.proxy, c.postgresql]:
        assert not c.may(src, c.serve, 8000), src.labels
        assert not c.may(src, c.train0, 29500), src.labels
    assert not c.may(c.serve, c.train0, 29500) and not c.may(c.train0, c.serve, 8000)   # alice's two workloads
    assert not c.may(c.train0, c.bob_train, 29500) and not c.may(c.train0, c.bob_batch, 22)


def test_job_pods_reach_dns_the_service_and_the_internet_not_the_cloud_metadata(cluster):
    c = cluster
    for pod in c.jobs():
        assert c.may(pod, c.service, c.service.ports["http"])       # checkpoint reports
        assert c.may(pod, c.dns, 53, "UDP") and c.may(pod, c.dns, 53, "TCP")
        assert c.may(pod, outside("151.101.0.223"), 443)              # pip, datasets, model hubs
        assert not c.may(pod, outside(METADATA), 80) and not c.may(pod, outside(METADATA), 443)
        assert not c.may(pod, c.postgresql, 5432) and not c.may(pod, c.hub, 8081)
        assert not c.may(pod, c.notebook["alice"], 8888) and not c.may(pod, outside("10.20.0.5"), 5432)
    # As in z2jh: port 53 of the metadata server stays open (GKE's Cloud DNS answers there).
    assert c.may(c.train0, outside(METADATA), 53, "UDP")


def test_the_services_policy_admits_job_pods(cluster):
    for pod in cluster.jobs():
        assert cluster.may(pod, cluster.service, cluster.service.ports["http"])


@pytest.mark.parametrize("rules, changes", [
    ({"privateIPs": True}, {("10.20.0.5", 5432): True, ("151.101.0.223", 443): True, (METADATA, 80): False}),
    ({"cloudMetadataServer": True}, {(METADATA, 80): True, ("10.20.0.5", 5432): False}),
    ({"nonPrivateIPs": False}, {("151.101.0.223", 443): False, (METADATA, 80): False}),
    ({"nonPrivateIPs": False, "privateIPs": True, "cloudMetadataServer": True},
     {("151.101.0.223", 443): False, ("10.20.0.5", 5432): True, (METADATA, 80): True}),
    ({"dnsPortsCloudMetadataServer": False, "dnsPortsKubeSystemNamespace": False, "dnsPortsPrivateIPs": False},
     {("dns", 53): False, (METADATA, 53): False}),
    ({"dnsPortsPrivateIPs": False}, {("dns", 53): True, (METADATA, 53): True}),
])
def test_egress_follows_egress_allow_rules(tmp_path, rules, changes):
    objs = render(tmp_path, values={"networkPolicy": {"jobs": {"egressAllowRules": rules}}})
    validate(jobs_policy(objs), K8S_VERSION, strict=True)
    c = Cluster(objs, tmp_path)
    for (dst, port), expected in changes.items():
        target = c.dns if dst == "dns" else outside(dst)
        assert c.may(c.train0, target, port, "UDP" if port == 53 else "TCP") is expected, (rules, dst, port)
    assert c.may(c.train0, c.service, c.service.ports["http"])      # whatever the rules
    assert c.may(c.train0, c.train1, 29500) and not c.may(c.bob_train, c.train0, 29500)


def test_more_rules_and_another_metadata_address(tmp_path):
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objs = render(tmp_path, values={"networkPolicy": {"jobs": {
        "ingress": [{"from": [monitoring], "ports": [{"port": 9100}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 443}]}],
        "cloudMetadataIP": "100.100.100.200"}}})
    validate(jobs_policy(objs), K8S_VERSION, strict=True)
    c = Cluster(objs, tmp_path)
    prometheus = Endpoint({"app": "prometheus"}, "monitoring", "10.0.5.1")
    assert c.may(prometheus, c.train0, 9100) and not c.may(prometheus, c.train0, 29500)
    assert c.may(c.train0, outside("10.20.0.5"), 443) and not c.may(c.train0, outside("10.20.0.5"), 80)
    assert not c.may(c.train0, outside("100.100.100.200"), 80) and c.may(c.train0, outside(METADATA), 80)


def test_jobs_in_another_namespace(tmp_path):
    objs = render(tmp_path, "launcher.namespace=gpu-jobs")
    for p in (o for o in objs if o["kind"] == "NetworkPolicy"):
        validate(p, K8S_VERSION, strict=True)
    assert jobs_policy(objs)["metadata"]["namespace"] == "gpu-jobs"
    c = Cluster(objs, tmp_path)
    assert c.serve.namespace == "gpu-jobs" and c.may(c.service, c.serve, 8000)
    assert c.may(c.train0, c.service, c.service.ports["http"]) and c.may(c.train1, c.train0, 29500)
    stranger = Endpoint({"app.kubernetes.io/name": "computehub", "app.kubernetes.io/component": "service"},
                        "gpu-jobs", "10.0.6.1")       # the service's labels, in the jobs' namespace
    assert not c.may(stranger, c.serve, 8000) and not c.may(c.bob_train, c.serve, 8000)


def test_no_policies_and_no_rights_over_them_when_disabled(tmp_path):
    objs = render(tmp_path, "networkPolicy.enabled=false")
    assert not [o for o in objs if o["kind"] == "NetworkPolicy"]
    granted = {r for rule in one(objs, "Role")["rules"] for r in rule["resources"]}
    assert "networkpolicies" not in granted
    launcher_cfg = json.loads(one(objs, "ConfigMap", name="t-computehub")["data"]["launcher_config.json"])
    assert launcher_cfg["KubeLauncher"]["network_policy"] is False
    made = launcher(objs, tmp_path).manifests(workload("wa1", "alice", workers=2), None)
    assert "NetworkPolicy" not in {m["kind"] for m in made}
    # ... and with them, exactly create and delete.
    rules = one(render(tmp_path), "Role")["rules"]
    assert [r["verbs"] for r in rules if "networkpolicies" in r["resources"]] == [["create", "delete"]]


@pytest.mark.parametrize("values, message", [
    ({"networkPolicy": {"jobs": {"egressAllowRules": {"privateIps": True}}}}, "privateIps"),
    ({"networkPolicy": {"jobs": {"cloudMetadataIP": "metadata.internal"}}}, "/networkPolicy/jobs/cloudMetadataIP"),
    ({"networkPolicy": {"jobs": {"egressAllowRules": {"nonPrivateIPs": "yes"}}}}, "nonPrivateIPs"),
])
def test_bad_values_are_refused(tmp_path, values, message):
    with pytest.raises(ChartError) as e:
        render(tmp_path, values=values)
    assert message in str(e.value)


# ---- z2jh's side: its hub, proxy and notebooks reaching the service --------------------------------

PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
Z2JH_DEFAULTS = {   # z2jh's egressAllowRules defaults: all on, but privateIPs and cloudMetadataServer for notebooks
    "hub": dict.fromkeys(["cloudMetadataServer", "dnsPortsCloudMetadataServer", "dnsPortsKubeSystemNamespace",
                          "dnsPortsPrivateIPs", "nonPrivateIPs", "privateIPs"], True),
}
Z2JH_DEFAULTS["proxy"] = dict(Z2JH_DEFAULTS["hub"])
Z2JH_DEFAULTS["singleuser-server"] = dict(Z2JH_DEFAULTS["hub"], privateIPs=False, cloudMetadataServer=False)
CLOSED = dict.fromkeys(Z2JH_DEFAULTS["hub"], False)


def z2jh_policy(component: str, allow: dict, egress: list, release: str = "jhub") -> dict:
    """z2jh's NetworkPolicy of its hub, proxy or notebooks as it renders their egress: its own pods'
    rules (to its hub, proxy, notebooks: none of them reach ComputeHub), the egressAllowRules as
    its jupyterhub.networkPolicy.renderEgressRules helper writes them, then the values' `egress`."""
    own = {"hub": "hub", "proxy": "proxy", "singleuser-server": "singleuser"}[component]
    rules = [{"to": [{"podSelector": {"matchLabels": {"app": "jupyterhub", "release": release, "component": c}}}]}
             for c in ("hub", "proxy", "singleuser-server") if c != component]
    dns = ([{"ipBlock": {"cidr": f"{METADATA}/32"}}] if allow["dnsPortsCloudMetadataServer"] else []) + \
        ([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}]
         if allow["dnsPortsKubeSystemNamespace"] else []) + \
        ([{"ipBlock": {"cidr": c}} for c in PRIVATE] if allow["dnsPortsPrivateIPs"] else [])
    if dns:
        rules.append({"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}], "to": dns})
    if allow["nonPrivateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE + [f"{METADATA}/32"]}}]})
    if allow["privateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": c}} for c in PRIVATE]})
    if allow["cloudMetadataServer"]:
        rules.append({"to": [{"ipBlock": {"cidr": f"{METADATA}/32"}}]})
    return {"metadata": {"name": own, "namespace": NAMESPACE},
            "spec": {"podSelector": {"matchLabels": {"app": "jupyterhub", "release": release, "component": component}},
                     "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": rules + list(egress)}}


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    return z2jh_values(tmp_path_factory.mktemp("notes"))


def z2jh_side(c: Cluster, notes: dict | None, allow: dict | None = None) -> list[dict]:
    """z2jh's three policies, with the NOTES' egress rules merged into its values (or not)."""
    egress = {"hub": notes["hub"]["networkPolicy"]["egress"] if notes else [],
              "proxy": notes["proxy"]["chp"]["networkPolicy"]["egress"] if notes else [],
              "singleuser-server": notes["singleuser"]["networkPolicy"]["egress"] if notes else []}
    return [z2jh_policy(k, allow or Z2JH_DEFAULTS[k], e) for k, e in egress.items()]


def test_z2jh_pods_reach_the_service_with_what_the_notes_add(cluster, notes):
    """Through z2jh's policies and the chart's: notebooks need the NOTES' singleuser rule (z2jh closes
    private IPs to them); the hub and the proxy reach the service with z2jh's defaults, and with the
    NOTES' rules even when all their egressAllowRules are off."""
    c = cluster
    port = c.service.ports["http"]
    for z2jh_policies, open_to in [
        (z2jh_side(c, None), {"hub", "proxy"}),
        (z2jh_side(c, notes), {"hub", "proxy", "notebook"}),
        (z2jh_side(c, notes, CLOSED), {"hub", "proxy", "notebook"}),
        (z2jh_side(c, None, CLOSED), set()),
    ]:
        policies = c.policies + z2jh_policies
        for name, pod in (("hub", c.hub), ("proxy", c.proxy), ("notebook", c.notebook["alice"])):
            assert allowed(policies, pod, c.service, port) is (name in open_to), (name, open_to)
        # Nothing of it opens the database or users' jobs to them.
        assert not allowed(policies, c.notebook["alice"], c.postgresql, 5432)
        assert not allowed(policies, c.proxy, c.serve, 8000)


def test_the_services_policy_admits_the_z2jh_release_it_is_told(tmp_path):
    """The service admits z2jh's hub, proxy and notebooks by the labels z2jh and KubeSpawner give them
    (app=jupyterhub, component, release); not a pod that merely calls itself `component: proxy`, and,
    with hub.release, not another z2jh release's pods."""
    def may(objs, labels):
        c = Cluster(objs, tmp_path)
        return c.may(Endpoint(labels, NAMESPACE, "10.0.7.1"), c.service, c.service.ports["http"])
    for release, admitted in (("", {"jhub", "other"}), ("jhub", {"jhub"})):
        objs = render(tmp_path, *([f"hub.release={release}"] if release else []))
        validate({**one(objs, "NetworkPolicy", component="service"), "metadata": {"name": "t-computehub"}},
                 K8S_VERSION, strict=True)
        for component in ("hub", "proxy", "singleuser-server"):
            for rel in ("jhub", "other"):
                labels = {"app": "jupyterhub", "release": rel, "component": component}
                assert may(objs, labels) is (rel in admitted), (release, labels)
            assert not may(objs, {"component": component})
            assert not may(objs, {"app": "jupyterhub", "release": "jhub", "component": "autohttps"})
