"""Kubernetes Nodes as ComputeHub node specs (pure: no I/O). See docs/inventory.md.

``node_spec`` turns one Node, as the JSON the API returns, into the body of
``PUT /api/v1/nodes/{name}``; ``diff`` says which specs to put and which nodes to
delete so that the service matches the cluster. Nodes made here carry
``computehub/source: kubernetes``; only those are ever deleted.
"""

from __future__ import annotations

from scheduler import ValidationError
from scheduler.model import NodeSpec
from scheduler.validation import NAME, node as normalise

from .inventory import model_key

SOURCE_LABEL = "computehub/source"
SOURCE = "kubernetes"
CORDONED_LABEL = "computehub/cordoned"   # "true": this node drains because Kubernetes cordoned it
DRAINING_TAINTS = ("node.kubernetes.io/unschedulable",)
MIB = 2**20


class NodeSkipped(ValueError):
    """A Kubernetes Node that cannot be a ComputeHub node (``reason`` says why)."""

    def __init__(self, name, reason: str):
        super().__init__(f"node {name!r}: {reason}")
        self.name, self.reason = name, reason


def node_spec(node: dict, *, gpu_resource: str = "nvidia.com/gpu", model_label: str = "nvidia.com/gpu.product",
              memory_label: str = "nvidia.com/gpu.memory", default_model: str | None = None,
              draining_taints=DRAINING_TAINTS) -> dict:
    """The ComputeHub node spec of a Kubernetes Node; raises ``NodeSkipped`` for a Node whose
    name ComputeHub does not accept (Kubernetes allows 253 characters, ComputeHub 63).

    - gpus: ``status.allocatable[gpu_resource]`` (0 when absent);
    - gpu_model: ``model_key`` of the GPU-feature-discovery product label ("NVIDIA-A100-SXM4-80GB"
      → "a100"), else ``default_model``; none for a node without GPUs;
    - gpu_memory: the memory label (MiB) in bytes;
    - cpu, memory: ``status.allocatable`` as Kubernetes writes them ("7910m", "131072Ki"),
      which the service parses itself;
    - healthy: the ``Ready`` condition is "True";
    - draining: cordoned (``spec.unschedulable``) or tainted NoSchedule/NoExecute with a key in
      ``draining_taints``.
    """
    meta = node.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise NodeSkipped(name, "a ComputeHub node name is 1-63 letters, digits, '.', '_', '-' or '@'")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    status = node.get("status") or {}
    alloc = status.get("allocatable") or {}
    gpus = alloc.get(gpu_resource, 0)
    if isinstance(gpus, str) and gpus.strip().isdigit():
        gpus = int(gpus)
    model = None
    if gpus:
        product = labels.get(model_label, "")
        model = model_key(product) if product else default_model
    cordoned = _cordoned(node.get("spec") or {}, draining_taints)
    ours = {SOURCE_LABEL: SOURCE, **({CORDONED_LABEL: "true"} if cordoned else {})}
    spec = {"name": name, "gpus": gpus, "gpu_model": model,
            "cpu": alloc.get("cpu", 0), "memory": alloc.get("memory", 0),
            "labels": {**{k: v for k, v in labels.items() if k != CORDONED_LABEL}, **ours},
            "healthy": _ready(status), "draining": cordoned}
    mem = labels.get(memory_label, "")
    if gpus and mem.isdigit():
        spec["gpu_memory"] = int(mem) * MIB
    return spec


def _ready(status: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _cordoned(spec: dict, taint_keys) -> bool:
    if spec.get("unschedulable") is True:
        return True
    return any(t.get("key") in taint_keys and t.get("effect") in ("NoSchedule", "NoExecute")
               for t in spec.get("taints") or [])


def managed(registered: dict) -> bool:
    """A registered node this source made (and may therefore delete)."""
    return (registered.get("labels") or {}).get(SOURCE_LABEL) == SOURCE


def _norm(d: dict) -> NodeSpec | None:
    """The spec as the service would store it ("32" and "32000m" alike); None if it would refuse it."""
    try:
        return normalise({k: v for k, v in d.items() if k in NodeSpec.__dataclass_fields__})
    except ValidationError:
        return None


def diff(wanted: dict[str, dict], registered: list[dict]) -> tuple[list[dict], list[str]]:
    """(specs to put, names to delete): a spec only when it differs from the registered node
    (compared as the service stores both; read-only fields such as free_gpus are ignored); a
    delete only for a node this source registered that is no longer wanted. A spec the service
    would refuse is put all the same, so that its answer says why. A node an admin drained in
    ComputeHub (draining, but not for a cordon) stays draining until the admin undrains it."""
    by_name = {r["name"]: r for r in registered}
    puts = []
    for name, spec in sorted(wanted.items()):
        old = by_name.get(name)
        if old is not None and old.get("draining") and not spec["draining"] and \
                (old.get("labels") or {}).get(CORDONED_LABEL) != "true":
            spec = {**spec, "draining": True}
        new = _norm(spec)
        if old is None or new is None or _norm(old) != new:
            puts.append(spec)
    deletes = sorted(n for n, r in by_name.items() if managed(r) and n not in wanted)
    return puts, deletes


def _amount(field: str, value) -> str:
    if field == "cpu":
        return f"{value / 1000:g}" if value % 1000 == 0 else f"{value}m"
    if field in ("memory", "gpu_memory"):
        return f"{value / 2**30:g}Gi"
    return str(value)


def what_changed(old: dict | None, new: dict, most_labels: int = 4) -> str:
    """One line for the log: a new node's size, or the fields that changed ("gpus 4 → 8,
    draining False → True, labels +zone=east")."""
    n = _norm(new)
    if n is None:
        return "as Kubernetes describes it"
    if old is None or _norm(old) is None:
        return (f"new: {n.gpus} GPU{'' if n.gpus == 1 else 's'}" + (f" × {n.gpu_model}" if n.gpu_model else "")
                + f", cpu {_amount('cpu', n.cpu)}, memory {_amount('memory', n.memory)}"
                + f", healthy {n.healthy}, draining {n.draining}")
    o = _norm(old)
    parts = [f"{f} {_amount(f, getattr(o, f))} → {_amount(f, getattr(n, f))}"
             for f in ("gpus", "gpu_model", "cpu", "memory", "gpu_memory", "healthy", "draining")
             if getattr(o, f) != getattr(n, f)]
    labels = [f"+{k}={v}" for k, v in sorted(n.labels.items()) if o.labels.get(k) != v and k != CORDONED_LABEL]
    labels += [f"-{k}" for k in sorted(o.labels) if k not in n.labels and k != CORDONED_LABEL]
    if labels:
        more = f" (+{len(labels) - most_labels} more)" if len(labels) > most_labels else ""
        parts.append("labels " + " ".join(labels[:most_labels]) + more)
    return ", ".join(parts) or "unchanged"
