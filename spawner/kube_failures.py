"""Why a Kubernetes pod is not doing its work, in words a person can act on (pure: no I/O).

The Kubernetes launcher (spawner/launch_kube.py) and QueuedKubeSpawner (spawner/kube.py)
read their pods' status through this module and report what it says to the service:
the workload ends with this reason (``cluster``: not the user's doing, reported as
``node_lost`` so that the service requeues it if its class requeues) and its GPUs are
released. See docs/launcher-kubernetes.md ("When a pod fails").

A pod is the API's JSON (camelCase, as ``ApiClient.sanitize_for_serialization`` or
KubeSpawner's reflector gives it). ``now`` is a UNIX time; the graces are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# A container that waits with one of these will never start: the workload fails at once.
NEVER = ("InvalidImageName", "ErrImageNeverPull")
# ... with one of these it might, if someone fixes the registry, the Secret, the ConfigMap:
# the workload fails once its pod has waited ``pull_grace`` seconds.
PULL = ("ErrImagePull", "ImagePullBackOff", "RegistryUnavailable")
CONFIG = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
# DisruptionTarget reasons (the pod is being deleted by the cluster, not by its owner).
DISRUPTED = {
    "PreemptionByScheduler": "preempted by the kube-scheduler on node {node} (a pod of higher priority)",
    "PreemptionByKubeScheduler": "preempted by the kube-scheduler on node {node} (a pod of higher priority)",
    "DeletionByTaintManager": "its node {node} went away (NotReady or unreachable, its pods evicted)",
    "DeletionByPodGC": "its node {node} went away (deleted from the cluster)",
    "TerminationByKubelet": "evicted from node {node} by its kubelet",
    "EvictionByEvictionAPI": "evicted from node {node} (a drain or the eviction API)",
}
# Pod-level reasons of a Failed pod that the node, not the workload, caused (and any "OutOf<resource>":
# the kubelet refused it for want of that resource).
NODE_REFUSED = ("OutOfcpu", "OutOfmemory", "OutOfpods", "UnexpectedAdmissionError", "NodeAffinity",
                "NodeLost", "Shutdown", "Terminated", "NodeShutdown", "Preempting")   # Preempting: by the kubelet


@dataclass
class PodTrouble:
    """What went wrong with a pod. ``cluster``: the cluster's doing (evicted, preempted, its
    node gone, never scheduled), not the user's: the work is requeued where its class
    requeues."""

    reason: str
    exit_code: int = 1
    cluster: bool = False


def parse_time(text) -> float | None:
    if not text:
        return None
    if isinstance(text, datetime):
        return text.timestamp()
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def quantity(value) -> str:
    """A memory quantity as a person reads it: "8589934592" → "8Gi"; "8Gi" stays."""
    s = str(value)
    if not s.isdigit():
        return s
    n = int(s)
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n / 2**30:.1f}Gi" if n >= 2**30 else s


def _memory_limit(pod: dict, container: str) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == container:
            mem = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            return quantity(mem) if mem else ""
    return ""


def _condition(pod: dict, kind: str) -> dict | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def _image(pod: dict, name: str, status: dict) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == name:
            return c.get("image") or status.get("image") or "?"
    return status.get("image") or "?"


def terminated(pod: dict, who: str, state: dict, name: str) -> PodTrouble:
    """A container that ended (``state``: its ``terminated``): OOMKilled says so, with the limit."""
    code = int(state.get("exitCode") or 0)
    reason = state.get("reason") or ""
    if reason == "OOMKilled":
        limit = _memory_limit(pod, name)
        return PodTrouble(f"{who} was OOMKilled" + (f" (memory limit {limit})" if limit else ""),
                          exit_code=code or 137)
    detail = ": " + state["message"].strip()[:300] if state.get("message") else ""
    signal = f", signal {code - 128}" if code > 128 else ""
    return PodTrouble(f"{who} exited with code {code}{signal}" + (f" ({reason}{detail})" if reason else ""),
                      exit_code=code or 1)


def waiting(pod: dict, who: str, now: float, pull_grace: float) -> PodTrouble | None:
    """A container that cannot start: an image that cannot be pulled, a Secret or ConfigMap
    that is missing. Once it has waited ``pull_grace`` seconds (never-to-start ones at once)."""
    status = pod.get("status") or {}
    age = now - (parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or now)
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        w = (cs.get("state") or {}).get("waiting") or {}
        reason, message = w.get("reason") or "", (w.get("message") or "").strip()[:300]
        detail = f"{reason}" + (f": {message}" if message else "")
        if reason in NEVER or (reason in PULL and age >= pull_grace):
            return PodTrouble(f"{who}: image {_image(pod, cs.get('name'), cs)!r} could not be pulled: {detail}")
        if reason in CONFIG and age >= pull_grace:
            return PodTrouble(f"{who}: container {cs.get('name')!r} could not be created: {detail}")
    return None


def not_started(pod: dict, who: str, now: float, pending_grace: float) -> PodTrouble | None:
    """A pod still not taken by any kubelet ``pending_grace`` seconds after it was made: the
    kube-scheduler finds no node (taints, affinity, the node gone), or the node it is bound to
    (``nodeName``) never starts it (gone, NotReady). The cluster's doing: requeued."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or status.get("containerStatuses") or status.get("hostIP"):
        return None         # a kubelet has it (pulling, creating): ``waiting`` judges that
    made = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    if made is None or now - made < pending_grace:
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    sched = _condition(pod, "PodScheduled") or {}
    if sched.get("status") == "False" or not node:
        why = f"{sched.get('reason') or 'not scheduled'}" + (f": {sched['message']}" if sched.get("message") else "")
        return PodTrouble(f"{who} was not scheduled for {now - made:.0f} s ({why.strip()[:300]})", cluster=True)
    return PodTrouble(f"{who} was not started by node {node} for {now - made:.0f} s "
                      "(the node is gone, NotReady or refuses it)", cluster=True)


def disrupted(pod: dict, who: str) -> PodTrouble | None:
    """Evicted, preempted, its node gone: the cluster ended it (requeued)."""
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    target = _condition(pod, "DisruptionTarget")
    if target and target.get("status") == "True":
        why = DISRUPTED.get(target.get("reason") or "", "disrupted on node {node}").format(node=node)
        detail = (target.get("message") or "").strip()[:300]
        if status.get("reason") == "Evicted" and status.get("message"):
            detail = status["message"].strip()[:300]
        return PodTrouble(f"{who}: {why}" + (f": {detail}" if detail else ""), cluster=True)
    if status.get("phase") == "Failed" and status.get("reason") == "Evicted":
        msg = (status.get("message") or "").strip()[:300]
        return PodTrouble(f"{who}: evicted from node {node}" + (f": {msg}" if msg else ""), cluster=True)
    if status.get("phase") == "Failed" and (status.get("reason") in NODE_REFUSED
                                            or str(status.get("reason") or "").startswith("OutOf")):
        msg = (status.get("message") or "").strip()[:300]
        return PodTrouble(f"{who}: node {node} refused or lost it: {status['reason']}" + (f": {msg}" if msg else ""),
                          cluster=True)
    return None


NODE_GONE = {"deleted": DISRUPTED["DeletionByPodGC"],
             "not ready": "its node {node} went away (NotReady or unreachable)",
             "drained": "its node {node} was drained (cordoned, its pods evicted)"}


def node_state(node_obj: dict | None) -> str | None:
    """What the API says of a node: "deleted" (``node_obj`` None: no such node), "not ready",
    "drained" (cordoned), or None: there, Ready and schedulable."""
    if node_obj is None:
        return "deleted"
    conditions = ((node_obj.get("status") or {}).get("conditions")) or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return "not ready"
    return "drained" if (node_obj.get("spec") or {}).get("unschedulable") else None


def inventory_state(node: dict | None) -> str | None:
    """``node_state`` of a node as ComputeHub's inventory has it (``GET nodes/<name>`` on the
    service; ``node`` None: 404): for those that may not read Nodes (the launcher's Role, a hub
    without a ClusterRole). The chart's inventory removes a deleted Node, marks a NotReady one
    unhealthy and a cordoned one draining (docs/inventory.md)."""
    if node is None:
        return "deleted"
    return "not ready" if not node.get("healthy", True) else "drained" if node.get("draining") else None


def node_gone(pod_name: str, who: str, node: str, state: str | None) -> PodTrouble | None:
    """A pod that vanished (no DisruptionTarget seen on it), judged by its node's ``state`` now
    (``node_state``): a node deleted (the pod garbage collector deletes its pods), not Ready (the
    node controller evicts them) or drained is the cluster's doing, said as ``disrupted`` says it
    of a pod it saw going. None: the node is fine; someone deleted the pod."""
    if state not in NODE_GONE:
        return None
    return PodTrouble(f"{who}: {NODE_GONE[state].format(node=node)}; its pod {pod_name} is gone", cluster=True)


def pod_trouble(pod: dict, who: str, now: float, *, pull_grace: float = 60.0,
                pending_grace: float = 300.0) -> PodTrouble | None:
    """What is wrong with ``pod`` (``who``: "worker 1", "the notebook server"), or None while it
    runs, starts or waits within its graces. A container that ended with exit code 0 is fine."""
    status = pod.get("status") or {}
    trouble = disrupted(pod, who)
    if trouble:
        return trouble
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return PodTrouble(f"{who}: its pod {pod['metadata'].get('name')} was deleted outside ComputeHub")
    for cs in status.get("containerStatuses") or []:
        t = (cs.get("state") or {}).get("terminated")
        if t and int(t.get("exitCode") or 0) != 0:
            return terminated(pod, who, t, cs.get("name"))
    if status.get("phase") == "Failed":
        msg = (status.get("message") or status.get("reason") or "").strip()[:300]
        return PodTrouble(f"{who} failed" + (f": {msg}" if msg else ""))
    return waiting(pod, who, now, pull_grace) or not_started(pod, who, now, pending_grace)


def restarts(pod: dict) -> int:
    return sum(int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def last_crash(pod: dict, who: str) -> PodTrouble:
    """Why a container Kubernetes restarted in place last ended (its ``lastState``)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (cs.get("lastState") or {}).get("terminated")
        if last:
            t = terminated(pod, who, last, cs.get("name"))
            back = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
            return PodTrouble(t.reason + (f"; {back}" if back else ""), t.exit_code)
    return PodTrouble(f"{who} crashed and was restarted by Kubernetes")
