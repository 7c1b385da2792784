"""What one look of the launcher costs the Kubernetes API with inference services running
(docs/launcher-kubernetes.md): their pods are read in one listing shared by all of them, so a
look makes as many requests with three services as with one; a Deployment deleted while its pods
are still there is noticed within ``deployment_check_interval``.

Real: the launcher driver (LauncherApp's reconcile loop) with the KubeLauncher backend, talking
HTTP to the Kubernetes API through a kubeconfig. Emulated: the Kubernetes API (kmock,
tests/spawner/kmock_cluster.py, which records every request it gets); the ReplicaSet controller
and the Deployment controller (the test makes each Deployment's pod and writes its ready status);
the service, replaced by a recorder of the driver's reports (tests/spawner/launcher_alone.py).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kube_controllers import patch_status  # noqa: E402
from test_launch_kube_failures import NS, Driver, cluster, scenario, workload  # noqa: E402,F401 - the same fixture

LOOKS = 4


async def running_and_ready(d: Driver, services: int) -> list[dict]:
    """``services`` inference workloads admitted, each with its replica up and its Deployment ready."""
    ws = [workload(f"wpoll{i:04d}", kind="inference") for i in range(services)]
    for w in ws:
        d.held[w["id"]] = w
    await d.until("all running", lambda: sum(s == "running" for s, _ in d.reports) == services)
    for w in ws:
        await d.replica(w["id"], f"ch-{w['id']}-5d8f-abcde")
        await d.kube(patch_status(d.cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/ch-{w['id']}/status",
                                  {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}))
    await d.until("all ready", lambda: sum(s == "update" and bool(e.get("ready")) for s, e in d.reports) == services)
    return ws


@pytest.mark.parametrize("services", [1, 3])
def test_a_look_at_running_services_lists_their_pods_once_whatever_their_number(cluster, tmp_path, services):
    """Before, every look read each service's Deployment and listed its pods: 2 requests per
    service per look (6 with three services, every poll_interval)."""
    async def body(d: Driver):
        await running_and_ready(d, services)
        await d.look(2)         # the first look reads each Deployment once; then not for a minute
        before = len(d.cluster.requests())
        await d.look(LOOKS)
        made = d.cluster.requests()[before:]
        assert [(m, p, q.get("labelSelector")) for m, p, q, _ in made] == \
            [("GET", f"/api/v1/namespaces/{NS}/pods", "computehub/kind=inference")] * LOOKS, made
        assert d.state("failed") is None and sum(s == "update" for s, _ in d.reports) == services, d.reports
    scenario(cluster, tmp_path, body)


def test_a_deployment_deleted_while_its_pods_remain_is_still_noticed(cluster, tmp_path):
    """kubectl delete --cascade=orphan: its pods stay, labelled as before; the periodic read of
    the Deployment finds it gone."""
    async def body(d: Driver):
        [w] = await running_and_ready(d, 1)
        await d.request("delete", f"/apis/apps/v1/namespaces/{NS}/deployments/ch-{w['id']}")
        assert d.pods(w["id"]), "its pod stays"
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"its Deployment ch-{w['id']} was deleted outside ComputeHub"), failed
    scenario(cluster, tmp_path, body, deployment_check_interval=1.0)


@pytest.mark.parametrize("services", [1, 3])
def test_services_checked_at_every_look_share_one_deployment_listing(cluster, tmp_path, services):
    """Services not yet ready (the driver asks at every look) and checked at every look
    (deployment_check_interval 0): a look lists their pods once and their Deployments once.
    Before, each service's Deployment was read twice a look (the check, the readiness): 1 + 2n
    requests a look (7 with three services), now 2."""
    async def body(d: Driver):
        ws = [workload(f"wlist{i:04d}", kind="inference") for i in range(services)]
        for w in ws:
            d.held[w["id"]] = w
        await d.until("all running", lambda: sum(s == "running" for s, _ in d.reports) == services)
        for w in ws:
            await d.replica(w["id"], f"ch-{w['id']}-5d8f-abcde")
        await d.look(2)
        before = len(d.cluster.requests())
        await d.look(LOOKS)
        made = Counter((m, p) for m, p, _, _ in d.cluster.requests()[before:])
        assert made == {("GET", f"/api/v1/namespaces/{NS}/pods"): LOOKS,
                        ("GET", f"/apis/apps/v1/namespaces/{NS}/deployments"): LOOKS}, made
        assert d.state("failed") is None and not any(e.get("ready") for _, e in d.reports), d.reports
    scenario(cluster, tmp_path, body, deployment_check_interval=0)


def test_running_services_are_checked_together_in_one_listing_per_interval(cluster, tmp_path):
    """Each service's periodic check used to be its own read, at its own time (three services:
    three reads per interval); a listing made for one serves the others' checks too."""
    async def body(d: Driver):
        await running_and_ready(d, 3)
        await d.look(2)
        before, start = len(d.cluster.requests()), time.monotonic()
        await d.look(12)
        made = [(m, p) for m, p, _, _ in d.cluster.requests()[before:] if "deployments" in p]
        intervals = (time.monotonic() - start) / INTERVAL
        assert made and set(made) == {("GET", f"/apis/apps/v1/namespaces/{NS}/deployments")}, made
        assert len(made) <= intervals + 1, (made, intervals)
    scenario(cluster, tmp_path, body, deployment_check_interval=INTERVAL)


INTERVAL = 0.5
