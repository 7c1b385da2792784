"""Kubernetes Nodes → ComputeHub node specs, and what a sync puts and deletes (pure functions;
the Node dicts are shaped as the API returns them, with GPU-feature-discovery labels)."""

import copy

import pytest

from scheduler import Scheduler
from spawner.inventory_kube import NodeSkipped, diff, node_spec, what_changed

READY = [{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
         {"type": "Ready", "status": "True", "reason": "KubeletReady"}]


def kube_node(name, *, gpus=None, labels=None, cpu="7910m", memory="131072Ki", conditions=READY, spec=None):
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "95551679124"}
    if gpus is not None:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "5c1e", "resourceVersion": "4711",
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}},
            "spec": spec or {"podCIDR": "10.244.1.0/24"},
            "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": copy.deepcopy(conditions)}}


GFD_A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
            "nvidia.com/gpu.count": "8", "nvidia.com/gpu.present": "true"}


def test_a_gfd_labelled_a100_node():
    spec = node_spec(kube_node("gpu-a100-1", gpus=8, labels=GFD_A100))
    assert spec["name"] == "gpu-a100-1" and spec["gpus"] == 8 and spec["gpu_model"] == "a100"
    assert spec["gpu_memory"] == 80 * 2**30
    assert spec["cpu"] == "7910m" and spec["memory"] == "131072Ki"       # the service parses both
    assert spec["labels"]["computehub/source"] == "kubernetes"
    assert spec["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert spec["healthy"] is True and spec["draining"] is False
    stored = Scheduler().put_node(spec)                 # a node the scheduler takes as it is
    assert stored.cpu == 7910 and stored.memory == 131072 * 1024 and stored.gpus == 8


def test_cpu_only_cordoned_and_not_ready_nodes():
    cpu = node_spec(kube_node("cpu-1", cpu="32", memory="64Gi"), default_model="a100")
    assert cpu["gpus"] == 0 and cpu["gpu_model"] is None and "gpu_memory" not in cpu
    # GPUs without a product label: the default model
    assert node_spec(kube_node("gpu-2", gpus=4), default_model="l4")["gpu_model"] == "l4"
    cordoned = node_spec(kube_node("gpu-3", gpus=4, labels=GFD_A100, spec={"unschedulable": True}))
    assert cordoned["draining"] is True and cordoned["healthy"] is True
    tainted = kube_node("gpu-4", gpus=4, spec={"taints": [{"key": "maintenance", "effect": "NoExecute"},
                                                         {"key": "gpu-broken", "effect": "PreferNoSchedule"}]})
    assert node_spec(tainted)["draining"] is False                   # not a listed taint
    assert node_spec(tainted, draining_taints=("maintenance",))["draining"] is True
    assert node_spec(tainted, draining_taints=("gpu-broken",))["draining"] is False   # only a preference
    not_ready = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
    assert node_spec(kube_node("gpu-5", gpus=4, conditions=not_ready))["healthy"] is False
    assert node_spec(kube_node("gpu-6", gpus=4, conditions=[]))["healthy"] is False


def test_a_name_computehub_cannot_take_is_skipped_with_the_reason():
    long = "ip-10-0-113-27." + "x" * 60 + ".compute.internal"     # valid in Kubernetes (≤ 253)
    with pytest.raises(NodeSkipped) as e:
        node_spec(kube_node(long, gpus=8, labels=GFD_A100))
    assert e.value.name == long and "1-63" in e.value.reason


def registered(spec, **read_only):
    """A node as GET /api/v1/nodes shows it: cpu in millicores, memory in bytes, read-only fields."""
    s = Scheduler().put_node(spec)
    return {**s.to_dict(), "free_gpus": list(range(s.gpus)), "free_cpu": "0m", "free_memory": 0,
            "simulated": False, "workloads": [], **read_only}


def test_diff_puts_only_what_changed_and_deletes_only_its_own_nodes():
    a = node_spec(kube_node("gpu-1", gpus=8, labels=GFD_A100))
    b = node_spec(kube_node("gpu-2", gpus=8, labels=GFD_A100))
    gone = node_spec(kube_node("gpu-9", gpus=8, labels=GFD_A100))
    by_hand = {"name": "workstation", "gpus": 2, "gpu_model": "rtx4090", "cpu": 16, "memory": "64Gi",
               "labels": {"zone": "office"}}
    regs = [registered(a), registered(b), registered(gone), registered(by_hand)]
    assert regs[0]["cpu"] == "7910m" and regs[0]["memory"] == 134217728
    assert diff({"gpu-1": a, "gpu-2": b, "gpu-9": gone}, regs) == ([], [])   # "32" == "32000m" etc.

    cordoned = node_spec(kube_node("gpu-2", gpus=8, labels=GFD_A100, spec={"unschedulable": True}))
    new = node_spec(kube_node("gpu-3", gpus=4, labels=GFD_A100))
    puts, deletes = diff({"gpu-1": a, "gpu-2": cordoned, "gpu-3": new}, regs)
    assert [p["name"] for p in puts] == ["gpu-2", "gpu-3"]
    assert deletes == ["gpu-9"]                          # never "workstation"
    assert what_changed(regs[1], cordoned) == "draining False → True"
    assert what_changed(None, new).startswith("new: 4 GPUs × a100, cpu 7910m")
    relabelled = node_spec(kube_node("gpu-1", gpus=4, labels={**GFD_A100, "zone": "east"}))
    assert what_changed(regs[0], relabelled) == "gpus 8 → 4, labels +zone=east"

    # A spec the service would refuse (GPU time-slicing advertises 8 × 16 replicas) is put anyway:
    # the service's answer says why.
    sliced = node_spec(kube_node("gpu-1", gpus=128, labels=GFD_A100))
    assert diff({"gpu-1": sliced, "gpu-2": b, "gpu-9": gone}, regs) == ([sliced], [])


def test_an_admins_drain_outlives_the_sync_and_a_cordons_ends_with_it():
    ready = node_spec(kube_node("gpu-1", gpus=8, labels=GFD_A100))
    drained_by_admin = registered({**ready, "draining": True})      # PATCH {"draining": true} in ComputeHub
    assert diff({"gpu-1": ready}, [drained_by_admin]) == ([], [])
    cordoned = node_spec(kube_node("gpu-1", gpus=8, labels=GFD_A100, spec={"unschedulable": True}))
    assert cordoned["draining"] and cordoned["labels"]["computehub/cordoned"] == "true"
    puts, _ = diff({"gpu-1": ready}, [registered(cordoned)])       # uncordoned: the drain ends
    assert [(p["name"], p["draining"]) for p in puts] == [("gpu-1", False)]
    assert "computehub/cordoned" not in puts[0]["labels"]
