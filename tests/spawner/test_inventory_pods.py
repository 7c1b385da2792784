"""What pods ComputeHub did not place take from a node (spawner/inventory_pods.py)."""

from spawner.inventory_pods import foreign_use, less_foreign, pod_requests


def pod(node, *containers, labels=None, phase="Running", init=(), overhead=None):
    spec = {"nodeName": node, "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)]
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "labels": labels or {}}, "spec": spec, "status": {"phase": phase}}


def test_a_pods_requests_are_counted_as_the_kube_scheduler_counts_them():
    p = pod("n1", {"requests": {"cpu": "500m", "memory": "1Gi"}},
            {"limits": {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": "2"}},     # limits alone: requests
            init=[{"requests": {"cpu": "4", "memory": "64Mi"}}], overhead={"cpu": "250m"})
    assert pod_requests(p) == (4000 + 250, 2**30 + 2**29, 2)       # the init container's 4 CPUs win
    assert pod_requests(pod("n1", {})) == (0, 0, 0)


def test_only_running_pods_computehub_did_not_place_count():
    daemon = pod("n1", {"requests": {"cpu": "100m", "memory": "128Mi"}})
    hub = pod("n1", {"requests": {"cpu": "1", "memory": "1Gi"}})
    outside = pod("n2", {"limits": {"nvidia.com/gpu": "1"}})
    ours = pod("n1", {"limits": {"nvidia.com/gpu": "4", "cpu": "8"}}, labels={"computehub/workload": "w-1"})
    done = pod("n1", {"requests": {"cpu": "2"}}, phase="Succeeded")
    pending = pod(None, {"requests": {"cpu": "2"}}, phase="Pending")          # not bound to a node yet
    assert foreign_use([daemon, hub, outside, ours, done, pending]) == {
        "n1": (1100, 2**30 + 2**27, 0), "n2": (0, 0, 1)}


def test_what_others_hold_is_taken_off_the_node():
    spec = {"name": "n1", "gpus": 8, "gpu_model": "a100", "cpu": "63900m", "memory": "527938128Ki"}
    assert less_foreign(spec, None) is spec and less_foreign(spec, (0, 0, 0)) is spec
    out = less_foreign(spec, (1100, 2**30, 1))
    assert out["cpu"] == "62800m" and out["memory"] == 527938128 * 1024 - 2**30 and out["gpus"] == 7
    assert less_foreign(spec, (10**9, 2**60, 9))["gpus"] == 0          # never below zero
