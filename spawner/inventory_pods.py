"""What pods ComputeHub did not place take from each node (pure: no I/O).

ComputeHub binds its pods to nodes itself, so its idea of a node's free CPU, memory
and GPUs must leave out what other pods already hold there: DaemonSets, the hub and
its proxy, system pods, GPU work run outside ComputeHub. Otherwise the kubelet
refuses ComputeHub's pod (OutOfcpu, OutOfmemory, UnexpectedAdmissionError) after
ComputeHub admitted it. ComputeHub's own pods (notebooks and jobs, labelled
``computehub/workload``) are ComputeHub's to count, and ended pods hold nothing.
"""

from __future__ import annotations

from scheduler import ValidationError
from scheduler.resources import parse_cpu, parse_memory

OWN_LABEL = "computehub/workload"
ENDED = ("Succeeded", "Failed")


def _requests(container: dict, gpu_resource: str) -> tuple[int, int, int]:
    res = container.get("resources") or {}
    req = {**(res.get("limits") or {}), **(res.get("requests") or {})}   # limits alone mean requests = limits
    try:
        return (parse_cpu(req.get("cpu", 0)), parse_memory(req.get("memory", 0)),
                int(float(req.get(gpu_resource, 0))))
    except (ValidationError, ValueError):
        return 0, 0, 0      # a quantity this parser does not read (e.g. "1e3"): not counted


def pod_requests(pod: dict, gpu_resource: str = "nvidia.com/gpu") -> tuple[int, int, int]:
    """(CPU millicores, memory bytes, GPUs) a pod holds on its node, as the kube-scheduler counts:
    the larger of its containers' sum and any one init container, plus the pod's overhead."""
    spec = pod.get("spec") or {}
    total = [sum(x) for x in zip((0, 0, 0), *(_requests(c, gpu_resource) for c in spec.get("containers") or []))]
    for c in spec.get("initContainers") or []:
        total = [max(a, b) for a, b in zip(total, _requests(c, gpu_resource))]
    overhead = _requests({"resources": {"requests": spec.get("overhead") or {}}}, gpu_resource)
    return tuple(a + b for a, b in zip(total, overhead))


def foreign_use(pods: list[dict], gpu_resource: str = "nvidia.com/gpu") -> dict[str, tuple[int, int, int]]:
    """Per node name: what its running pods that ComputeHub did not place request."""
    use: dict[str, tuple[int, int, int]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        labels = (p.get("metadata") or {}).get("labels") or {}
        if not node or OWN_LABEL in labels or (p.get("status") or {}).get("phase") in ENDED:
            continue
        use[node] = tuple(a + b for a, b in zip(use.get(node, (0, 0, 0)), pod_requests(p, gpu_resource)))
    return use


def less_foreign(spec: dict, taken: tuple[int, int, int] | None) -> dict:
    """The node spec with what other pods hold taken off its CPU, memory and GPUs."""
    if not taken or not any(taken):
        return spec
    cpu, memory, gpus = taken
    try:
        free_cpu = max(0, parse_cpu(spec.get("cpu", 0)) - cpu)
        free_memory = max(0, parse_memory(spec.get("memory", 0)) - memory)
    except ValidationError:
        return spec         # the service refuses the spec anyway, and says why
    out = {**spec, "cpu": f"{free_cpu}m", "memory": free_memory}
    if gpus:
        out["gpus"] = max(0, int(spec.get("gpus") or 0) - gpus)
    return out
