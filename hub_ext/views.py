"""How scheduler objects look in the REST API (JSON)."""

from __future__ import annotations

from scheduler.model import PENDING, STOP_OVERDUE, STOPPING, STOPPING_SINCE, Workload
from scheduler.resources import render

WORKLOAD_FIELDS = ("id", "name", "user", "queue", "kind", "priority", "state", "workers", "gpu_model",
                   "node_selector", "time_limit", "checkpoint_every", "after", "array", "submitted_at", "eligible_at",
                   "admitted_at", "started_at", "ended_at", "preemptions", "checkpointed_at", "checkpoint_seen_every",
                   "saves_on_stop", "reason", "exit_code", "metadata")


def workload(w: Workload, positions: dict | None = None) -> dict:
    d = {f: getattr(w, f) for f in WORKLOAD_FIELDS}
    d["resources"] = render(w.request)
    d["placement"] = [a.to_dict() for a in w.placement]
    if positions is not None and w.state == PENDING and w.id in positions:
        d["position"], d["position_in_queue"] = positions[w.id]
    return d


def queue(spec, tree, counts: dict, caller=None) -> dict:
    """``caller``: who asks, when not everything may be shown: a user sees the per-user limit
    named for them only (others' names are not theirs to list); admins, spawners and the
    queue's team leads see every one."""
    d = spec.to_dict()
    if caller is not None and not (caller.on_behalf or caller.all_teams
                                   or caller.leads(tree.access.get(spec.name, ()))):
        d["user_limits"] = {u: v for u, v in d["user_limits"].items() if u == caller.name}
    d["usage"] = render(tree.usage.get(spec.name, {}))
    d["effective_guaranteed"] = render(tree.guaranteed.get(spec.name, {}))
    d["open_to"] = list(tree.access.get(spec.name, ()))    # its groups, else its nearest ancestor's
    d["leaf"] = tree.is_leaf(spec.name)
    d["children"] = list(tree.children.get(spec.name, []))
    d["pending"], d["running"] = counts.get(spec.name, (0, 0))
    return d


# Labels the Kubernetes inventory (spawner/inventory_kube.py) puts on the nodes it registers.
KUBE_SOURCE = ("computehub/source", "kubernetes")
KUBE_CORDONED = ("computehub/cordoned", "true")


def cordoned(spec) -> bool:
    """Draining because Kubernetes cordoned the node (only an uncordon there lifts it)."""
    return spec.draining and spec.labels.get(KUBE_CORDONED[0]) == KUBE_CORDONED[1]


def node(n, holders: list[Workload], visible=None) -> dict:
    """``visible(workload)``: whether the caller may see that workload; the others on the node
    are listed by their GPUs only (id and user null)."""
    d = n.spec.to_dict()
    d["source"] = "kubernetes" if n.spec.labels.get(KUBE_SOURCE[0]) == KUBE_SOURCE[1] else "registered"
    d["cordoned"] = cordoned(n.spec)
    d["free_gpus"] = list(n.free_gpus)
    d["free_cpu"] = f"{n.free_cpu}m"
    d["free_memory"] = n.free_memory
    d["simulated"] = n.spec.labels.get("computehub/simulated") == "true"
    d["workloads"] = [{"id": w.id, "user": w.user} if visible is None or visible(w) else {"id": None, "user": None}
                      for w in holders]
    for entry, w in zip(d["workloads"], holders):
        entry["gpus"] = [list(a.gpus) for a in w.placement if a.node == n.spec.name]
        if entry["id"] is not None:
            entry["state"] = w.state
            if w.state in STOPPING:     # told to stop: since when, and whether past the stop deadline
                entry["stopping_since"] = w.metadata.get(STOPPING_SINCE)
                entry["stop_overdue"] = STOP_OVERDUE in w.metadata
    return d
