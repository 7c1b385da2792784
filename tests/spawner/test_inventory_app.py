"""``computehub-inventory`` end to end: the cluster's Nodes kept registered in ComputeHub.

Real: JupyterHub + proxy + the ComputeHub service (tests/hub_ext/realhub.py), its scopes and
tokens, and the app itself, run as its command line (``python -m spawner.inventory_app``)
with a kubeconfig, talking HTTP to both. Emulated: the Kubernetes API, by kmock
(tests/spawner/kmock_cluster.py; no real API server can run here). The test plays the
kubelets, which register (create) their Node objects, and the admin, who cordons
(``kubectl cordon``: a merge patch of spec.unschedulable) and deletes Nodes through the API.
The scenarios build on each other, in file order, on one hub.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from kmock_cluster import KmockCluster  # noqa: E402
from localhub import wait_for  # noqa: E402
from realhub import ROOT, RealHub, free_port  # noqa: E402

INVENTORY_TOKEN = os.urandom(16).hex()        # the "inventory" service: inventory_services=[...]
POD_TOKEN = os.urandom(16).hex()              # "computehub-inventory": inventory_api_token=... (the chart's way)
READY = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]


def kube_node(name, gpus=0, product=None, cpu="63900m", memory="527938128Ki"):
    labels = {"kubernetes.io/hostname": name}
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.memory": "81559"})
    if product:
        labels["nvidia.com/gpu.product"] = product
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": READY}}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    d = tmp_path_factory.mktemp("inventory")
    cluster = KmockCluster(d).start()
    # Two inventory services: "inventory" (a hub service given the role by inventory_services) and
    # "computehub-inventory" (registered with its token by inventory_api_token, as the chart does).
    service = {"name": "inventory", "api_token": INVENTORY_TOKEN}
    h = RealHub(d, configure_kwargs=f'inventory_services=["inventory"], inventory_api_token="{POD_TOKEN}"',
                spawner_config=f"c.JupyterHub.services.append({service!r})\n")
    h.cluster, h.kubeconfig = cluster, cluster.write_kubeconfig(d / "kubeconfig")
    try:
        h.start()
        yield h
    finally:
        h.stop()
        cluster.stop()


# --- the kubelets' and the admin's side of the cluster ---------------------------------------

def register(hub, node):
    kube(hub, "POST", "", node)


def kube(hub, method, name, body=None):
    async def go():
        headers = {"Content-Type": "application/merge-patch+json"} if body is not None and method == "PATCH" else {}
        path = f"/api/v1/nodes/{name}" if name else "/api/v1/nodes"
        async with hub.cluster.emulator.request(method, path, json=body, headers=headers) as r:
            r.raise_for_status()
    hub.cluster.run(go())


def kube_pods(hub, method, namespace, name, body=None):
    async def go():
        path = f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")
        async with hub.cluster.emulator.request(method, path, json=body) as r:
            r.raise_for_status()
    hub.cluster.run(go())


# --- the app and the service ------------------------------------------------------------------

def inventory(hub, token, *args, kubeconfig=None, timeout=60):
    env = dict(os.environ, COMPUTEHUB_TOKEN=token)
    env.pop("JUPYTERHUB_API_TOKEN", None)
    cmd = [sys.executable, "-m", "spawner.inventory_app", "--once", "--config=", f"--url={hub.service_url}",
           f"--kubeconfig={kubeconfig or hub.kubeconfig}", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def nodes(hub):
    r = hub.call("GET", "/nodes", hub.tokens["ada"])
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()["nodes"]}


def test_cluster_nodes_appear_with_their_gpus_model_and_labels(hub):
    register(hub, kube_node("kube-a100-1", 8, "NVIDIA-A100-SXM4-80GB"))
    register(hub, kube_node("kube-h100-1", 4, "NVIDIA-H100-80GB-HBM3"))
    register(hub, kube_node("kube-cpu-1", cpu="32", memory="128Gi"))
    run = inventory(hub, INVENTORY_TOKEN)
    assert run.returncode == 0, run.stderr
    assert "kube-a100-1: new: 8 GPUs × a100" in run.stderr, run.stderr
    ns = nodes(hub)
    a, h, c = ns["kube-a100-1"], ns["kube-h100-1"], ns["kube-cpu-1"]
    assert (a["gpus"], a["gpu_model"], a["gpu_memory"]) == (8, "a100", 81559 * 2**20)
    assert (a["cpu"], a["memory"], a["healthy"], a["draining"]) == ("63900m", 527938128 * 1024, True, False)
    assert a["labels"]["computehub/source"] == "kubernetes"
    assert a["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert (h["gpus"], h["gpu_model"]) == (4, "h100")
    assert (c["gpus"], c["gpu_model"], c["cpu"]) == (0, None, "32000m")
    assert {"gpu-a", "gpu-b"} <= set(ns)            # the service's configured nodes are left alone
    again = inventory(hub, INVENTORY_TOKEN)         # nothing changed: nothing put
    assert again.returncode == 0 and "new:" not in again.stderr and "→" not in again.stderr, again.stderr


def test_a_cordoned_node_drains_and_a_not_ready_one_is_unhealthy(hub):
    kube(hub, "PATCH", "kube-h100-1", {"spec": {"unschedulable": True}})
    kube(hub, "PATCH", "kube-cpu-1", {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    run = inventory(hub, POD_TOKEN)                # the chart's external service and token
    assert run.returncode == 0, run.stderr
    assert "kube-h100-1: draining False → True" in run.stderr, run.stderr
    assert "kube-cpu-1: healthy True → False" in run.stderr, run.stderr
    ns = nodes(hub)
    assert ns["kube-h100-1"]["draining"] is True and ns["kube-h100-1"]["healthy"] is True
    assert ns["kube-cpu-1"]["healthy"] is False and ns["kube-a100-1"]["draining"] is False


def test_an_admins_drain_stays_until_the_admin_lifts_it(hub):
    r = hub.call("PATCH", "/nodes/kube-a100-1", hub.tokens["ada"], json={"draining": True})
    assert r.status_code == 200 and r.json()["draining"] is True, r.text
    run = inventory(hub, POD_TOKEN)
    assert run.returncode == 0 and "kube-a100-1" not in run.stderr, run.stderr
    assert nodes(hub)["kube-a100-1"]["draining"] is True
    hub.call("PATCH", "/nodes/kube-a100-1", hub.tokens["ada"], json={"draining": False})
    assert inventory(hub, POD_TOKEN).returncode == 0 and nodes(hub)["kube-a100-1"]["draining"] is False
    # The drain of a cordon ends with the cordon.
    kube(hub, "PATCH", "kube-h100-1", {"spec": {"unschedulable": False}})
    run = inventory(hub, POD_TOKEN)
    assert "kube-h100-1: draining True → False" in run.stderr, run.stderr
    kube(hub, "PATCH", "kube-h100-1", {"spec": {"unschedulable": True}})
    assert inventory(hub, POD_TOKEN).returncode == 0 and nodes(hub)["kube-h100-1"]["draining"] is True


def test_what_other_pods_hold_is_not_free_for_computehub(hub):
    """A DaemonSet-like pod and GPU work run outside ComputeHub hold part of a node; ComputeHub's
    own pods (labelled computehub/workload) are ComputeHub's to count; an ended pod holds nothing."""
    def pod(ns, name, resources, labels=None, phase=None):
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
                "spec": {"nodeName": "kube-a100-1", "containers": [{"name": "c", "image": "x", "resources": resources}]}}
        if phase:
            body["status"] = {"phase": phase}
        return body
    before = nodes(hub)["kube-a100-1"]
    made = [pod("kube-system", "agent", {"requests": {"cpu": "500m", "memory": "1Gi"}}),
            pod("research", "outside", {"limits": {"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "3Gi"}}),
            pod("jhub", "ch-w1", {"limits": {"nvidia.com/gpu": "4", "cpu": "8"}}, {"computehub/workload": "w-1"}),
            pod("research", "done", {"limits": {"nvidia.com/gpu": "1"}}, phase="Succeeded")]
    for p in made:
        kube_pods(hub, "POST", p["metadata"]["namespace"], "", p)
    run = inventory(hub, POD_TOKEN)
    assert run.returncode == 0, run.stderr
    after = nodes(hub)["kube-a100-1"]
    assert after["gpus"] == before["gpus"] - 2, run.stderr
    assert int(after["cpu"][:-1]) == int(before["cpu"][:-1]) - 2000
    assert after["memory"] == before["memory"] - 4 * 2**30
    for p in made:
        kube_pods(hub, "DELETE", p["metadata"]["namespace"], p["metadata"]["name"])
    assert inventory(hub, POD_TOKEN).returncode == 0
    assert nodes(hub)["kube-a100-1"]["gpus"] == before["gpus"]


def test_a_node_that_left_the_cluster_goes_but_hand_registered_ones_stay(hub):
    r = hub.call("PUT", "/nodes/workstation", hub.tokens["ada"],
                 json={"gpus": 2, "gpu_model": "rtx4090", "cpu": 16, "memory": "64Gi"})
    assert r.status_code == 201, r.text
    kube(hub, "DELETE", "kube-cpu-1")
    keep = inventory(hub, POD_TOKEN, "--keep-missing")
    assert keep.returncode == 0 and "kube-cpu-1" in nodes(hub), keep.stderr
    run = inventory(hub, POD_TOKEN)
    assert run.returncode == 0, run.stderr
    assert "kube-cpu-1: removed" in run.stderr, run.stderr
    ns = nodes(hub)
    assert "kube-cpu-1" not in ns and {"workstation", "gpu-a", "gpu-b", "kube-a100-1", "kube-h100-1"} <= set(ns)


def test_a_failed_kubernetes_list_removes_nothing(hub, tmp_path):
    kube(hub, "DELETE", "kube-h100-1")          # gone from the cluster, but the list below fails
    down = tmp_path / "kubeconfig"
    down.write_text(hub.kubeconfig.read_text().replace(hub.cluster.url, f"http://127.0.0.1:{free_port()}"))
    run = inventory(hub, POD_TOKEN, kubeconfig=down)
    assert run.returncode == 1 and "Kubernetes: could not list nodes" in run.stderr, run.stderr
    assert "kube-h100-1" in nodes(hub)
    register(hub, kube_node("kube-h100-1", 4, "NVIDIA-H100-80GB-HBM3"))    # back, uncordoned


def test_a_token_without_the_nodes_scope_is_told_so(hub):
    before = nodes(hub)
    register(hub, kube_node("kube-a100-2", 8, "NVIDIA-A100-SXM4-80GB"))
    for token in (hub.nobody_token, hub.tokens["alice"]):      # no scopes; a user's (submit only)
        run = inventory(hub, token)
        assert run.returncode == 1, run.stderr
        assert "custom:computehub:nodes" in run.stderr, run.stderr
        assert "new:" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert "lacks the scope custom:computehub:nodes" in run.stderr and "'alice'" in run.stderr, run.stderr
    assert nodes(hub).keys() == before.keys()


def test_one_node_the_service_refuses_does_not_stop_the_others(hub):
    # GPU time-slicing advertises replicas: 8 GPUs × 16 = 128, which the service refuses.
    register(hub, kube_node("kube-sliced", 128, "NVIDIA-A100-SXM4-80GB"))
    long = "ip-10-0-113-27." + "x" * 60 + ".compute.internal"
    register(hub, kube_node(long, 8, "NVIDIA-A100-SXM4-80GB"))
    run = inventory(hub, POD_TOKEN)
    assert run.returncode == 1, run.stderr
    assert "kube-sliced: refused by the service (400" in run.stderr and "at most 64" in run.stderr, run.stderr
    assert f"{long}: skipped: a ComputeHub node name is 1-63" in run.stderr, run.stderr
    ns = nodes(hub)
    assert ns["kube-a100-2"]["gpus"] == 8 and "kube-sliced" not in ns            # the others synced
    assert ns["kube-h100-1"]["draining"] is False
    kube(hub, "DELETE", "kube-sliced")
    kube(hub, "DELETE", long)


def node_lists(hub) -> int:
    """How many times the cluster's nodes were listed (each sync lists them once; watches aside)."""
    return sum(1 for method, path, query, _ in hub.cluster.requests()
               if method == "GET" and path == "/api/v1/nodes" and str(query.get("watch", "")).lower() not in
               ("true", "1"))


def test_it_follows_the_nodes_as_they_change_until_sigterm(hub, tmp_path):
    """Syncs every 10 minutes, so what arrives within the test arrives through the Node watch:
    a new node, its cordon, its removal, each within seconds."""
    env = dict(os.environ, COMPUTEHUB_TOKEN=POD_TOKEN)
    log = open(tmp_path / "inventory.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "spawner.inventory_app", "--config=", f"--url={hub.service_url}",
                             f"--kubeconfig={hub.kubeconfig}", "--interval=600", "--selector=nvidia.com/gpu.present"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        register(hub, kube_node("kube-a100-3", 8, "NVIDIA-A100-SXM4-80GB"))
        wait_for("the new node", lambda: "kube-a100-3" in nodes(hub), 30)
        # A kubelet's heartbeat changes nothing ComputeHub reads: no sync (no list of the nodes).
        time.sleep(1.5)
        syncs = node_lists(hub)
        for beat in ("2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"):
            kube(hub, "PATCH", "kube-a100-3", {"status": {"conditions": [dict(READY[0], lastHeartbeatTime=beat)]}})
        time.sleep(2.0)
        assert node_lists(hub) == syncs
        kube(hub, "PATCH", "kube-a100-3", {"spec": {"unschedulable": True}})
        wait_for("it to drain", lambda: nodes(hub)["kube-a100-3"]["draining"], 30)
        kube(hub, "DELETE", "kube-a100-3")
        wait_for("it to go", lambda: "kube-a100-3" not in nodes(hub), 30)
        ns = nodes(hub)     # the selector leaves out nothing with GPUs; the configured nodes stay
        assert {"kube-a100-1", "kube-a100-2", "kube-h100-1", "gpu-a", "workstation"} <= set(ns), sorted(ns)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        out = log.read()
        log.close()
    assert "matching 'nvidia.com/gpu.present'" in out and "every 600 s" in out, out
    assert "ComputeHub inventory stopped" in out and "Traceback" not in out, out


def test_the_charts_inventory_role_allows_every_request_it_made(hub, tmp_path):
    """Every request the inventory made above, read as RBAC reads it, is allowed by the
    ClusterRole helm/computehub gives it, and that role grants nothing it never used."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helm"))
    from chart import one, render
    from rbac import allows, needed
    made = {(g, r, v) for g, r, v, _ in needed(hub.cluster.requests())}
    assert {("", "nodes", "list"), ("", "nodes", "watch"), ("", "pods", "list")} <= made
    rules = one(render(tmp_path), "ClusterRole")["rules"]
    assert not [m for m in made if not allows(rules, *m)], made
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == made
