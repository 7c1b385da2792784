"""The Kubernetes launcher's NetworkPolicy per workload (``KubeLauncher.network_policy``).

The backend alone (no hub) against an emulated Kubernetes API (kmock,
tests/spawner/kmock_cluster.py); no Job controller runs, so jobs have no pods here. Shown:
with the setting (as the chart sets it with networkPolicy.enabled) each training, batch and
inference workload gets a NetworkPolicy ``ch-<id>`` next to its Job or Deployment, created
before it, selecting its pods and letting them reach each other only, deleted when it stops or
ends; one an earlier run left does not stop a start; without the setting the launcher never
touches NetworkPolicies. Every request it made is allowed by the chart's launcher Role for
that setting. What the policies allow, with the chart's, is tests/helm/test_chart_netpol.py's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from kubernetes_validate.utils import validate

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helm"))
from kmock_cluster import KmockCluster  # noqa: E402
from kube_controllers import create  # noqa: E402

NS = "hub"
K8S_VERSION = "1.33.0"


@pytest.fixture
def cluster(tmp_path):
    c = KmockCluster(tmp_path).start()
    c.kubeconfig = str(c.write_kubeconfig(tmp_path / "kubeconfig", NS))
    try:
        yield c
    finally:
        c.stop()


def workload(wid: str, kind: str = "training", workers: int = 2) -> dict:
    job = {"command": ["python", "-m", "http.server"], "port": 8000} if kind == "inference" else {"command": ["true"]}
    return {"id": wid, "user": "carol", "queue": "nlp", "kind": kind, "priority": kind, "workers": workers,
            "resources": {"gpu": 1}, "placement": [{"node": "kube-gpu-1", "gpus": [0]}] * workers,
            "metadata": {"job": job}, "admitted_at": 1000.0}


def run(cluster, tmp_path, network_policy: bool, scenario):
    from spawner.launch_kube import KubeLauncher

    async def go():
        backend = KubeLauncher(namespace=NS, kubeconfig=cluster.kubeconfig, logs_dir=str(tmp_path),
                               network_policy=network_policy)
        try:
            return await scenario(backend)
        finally:
            await backend.close()
    return asyncio.run(go())


def policies(cluster) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in cluster.objects("networkpolicies", NS)}


def check_rbac(cluster, tmp_path, *sets):
    """Every request the launcher made is one the chart's launcher Role (rendered with ``sets``) allows."""
    from chart import one, render
    from rbac import allows, needed
    rules = one(render(tmp_path, f"launcher.namespace={NS}", *sets), "Role")["rules"]
    made = needed(cluster.requests())
    refused = sorted((g, r, v) for g, r, v, _ in made if not allows(rules, g, r, v))
    assert not refused, f"the chart's launcher Role refuses {refused}"
    return made


def test_each_workload_gets_a_policy_for_its_own_pods_while_it_runs(cluster, tmp_path):
    work = [workload("wt1"), workload("wb1", "batch", 1), workload("wi1", "inference", 2)]
    seen = {}

    async def scenario(backend):
        for w in work:
            await backend.start(w)
        seen["running"] = policies(cluster)
        await backend.stop(work[0], 0)          # cancelled or preempted
        await backend.cleanup(work[1])          # ended by itself
        seen["after"] = policies(cluster)
        await backend.stop(work[2], 0)

    run(cluster, tmp_path, True, scenario)
    assert set(seen["running"]) == {"ch-wt1", "ch-wb1", "ch-wi1"}
    for w in work:
        pol = seen["running"][f"ch-{w['id']}"]
        main = next(o for plural in ("jobs", "deployments") for o in cluster.created(plural)
                    if o["metadata"]["name"] == f"ch-{w['id']}")
        pod_labels = main["spec"]["template"]["metadata"]["labels"]
        own = pol["spec"]["podSelector"]
        assert own == {"matchLabels": {"computehub/workload": w["id"],
                                       "app.kubernetes.io/managed-by": "computehub-launcher"}}
        assert own["matchLabels"].items() <= pod_labels.items()
        assert pol["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert pol["spec"]["ingress"] == [{"from": [{"podSelector": own}]}]
        assert pol["spec"]["egress"] == [{"to": [{"podSelector": own}]}]
        assert pol["metadata"]["labels"]["computehub/workload"] == w["id"]
    for pol in cluster.created("networkpolicies"):
        validate(pol, K8S_VERSION, strict=True)
    assert set(seen["after"]) == {"ch-wi1"} and policies(cluster) == {}
    # Made before the pods' Job or Deployment: workers never start cut off from each other.
    order = [(m["kind"], m["metadata"]["name"]) for m in cluster.created()]
    for w in work:
        main = "Deployment" if w["kind"] == "inference" else "Job"
        assert order.index(("NetworkPolicy", f"ch-{w['id']}")) < order.index((main, f"ch-{w['id']}"))
    made = check_rbac(cluster, tmp_path)
    assert {(g, r, v) for g, r, v, _ in made if r == "networkpolicies"} == {
        ("networking.k8s.io", "networkpolicies", "create"), ("networking.k8s.io", "networkpolicies", "delete")}
    cluster.check()


def test_a_policy_an_earlier_run_left_does_not_stop_a_start(cluster, tmp_path):
    w = workload("wt2")
    stale = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "ch-wt2", "labels": {"computehub/workload": "wt2"},
                          "annotations": {"computehub/run": "1.000000"}},
             "spec": {"podSelector": {"matchLabels": {"computehub/workload": "wt2"}}}}
    cluster.run(create(cluster, f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", stale))

    async def scenario(backend):
        notes = await backend.start(w)
        there = policies(cluster)
        await backend.stop(w, 0)
        return notes, there

    notes, there = run(cluster, tmp_path, True, scenario)
    assert "Job ch-wt2" in notes["message"] and set(there) == {"ch-wt2"}
    assert cluster.objects("jobs", NS) == [] and policies(cluster) == {}


def test_without_the_setting_no_policy_is_made_or_deleted(cluster, tmp_path):
    w = workload("wt3")

    async def scenario(backend):
        await backend.start(w)
        await backend.stop(w, 0)

    run(cluster, tmp_path, False, scenario)
    assert not [p for _, p, _, _ in cluster.requests() if "networkpolicies" in p]
    assert cluster.created("jobs") and not cluster.created("networkpolicies")
    check_rbac(cluster, tmp_path, "networkPolicy.enabled=false")
