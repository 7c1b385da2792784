"""How the Kubernetes launcher sees its work end: ``poll`` reads the Job or Deployment and
its pods, and names the cause (spawner/kube_failures.py) when a pod cannot start, is
OOMKilled, evicted, preempted, left without a node, or crash-loops. A mixin of
``spawner.launch_kube.KubeLauncher`` (which supplies ``api``, ``_read``, ``_save_logs``, ``ship_logs``,
``_log``); see docs/launcher-kubernetes.md ("When a pod fails").
"""

from __future__ import annotations

import time
from urllib.parse import quote

from traitlets import Float, validate

from scheduler.config_checks import check_number

from .kube import LABEL_PREFIX, label_value
from .kube_failures import (NODE_GONE, PodTrouble, disrupted, inventory_state, last_crash, node_gone, not_started,
                            parse_time, pod_trouble, restarts, waiting)
from .kube_manifests import JOB_INDEX_ANNOTATION, name_of, placement_nodes
from .launch_base import Ended, LauncherBackend
from .service_client import ServiceError

NODE_STATE_TTL = 5.0                   # seconds a node's state, as the inventory has it, is taken as known
STRANDING = ("deleted", "not ready")   # node states in which a pod bound there never starts

# Every inference replica and Deployment (they carry the label, also those of launchers from before
# app.kubernetes.io/managed-by was set).
INFERENCE_PODS = f"{LABEL_PREFIX}kind=inference"


class PodWatch(LauncherBackend):
    """``poll`` for Jobs (training, batch) and Deployments (inference), reading their pods."""

    container_start_grace = Float(60.0, config=True, help="""Seconds a pod's container may keep failing to
        start because its image cannot be pulled (ErrImagePull, ImagePullBackOff) or a Secret or ConfigMap it
        needs is missing (CreateContainerConfigError) before the workload fails with that reason and its GPUs
        are released (seconds, counted from the pod's creation; InvalidImageName fails at once).""")
    unscheduled_grace = Float(300.0, config=True, help="""Seconds a pod of admitted work may stay unscheduled
        (the kube-scheduler finds no node: taints, affinity) or not taken by the node it is bound to (the node
        is gone or NotReady) before the admission is given back: the workload is reported node_lost with the
        reason, and the service requeues it if its class requeues (seconds, from the pod's creation).""")
    deployment_check_interval = Float(60.0, config=True, help="""Seconds between checks of a running
        inference service's Deployment while its pods are there, to notice one deleted outside ComputeHub
        (its pods are read at every look, in one listing shared by all services; a service with no live pod
        has its Deployment checked at every look). Deployments are read in one listing too, shared by the
        services checked in a look and by those not yet ready.""")

    @validate("deployment_check_interval")
    def _check_interval_ok(self, proposal):
        return check_number(f"{type(self).__name__}.deployment_check_interval", proposal.value, low=0, unit="seconds")

    def __init__(self, **kw):
        super().__init__(**kw)
        self._seen: dict[str, dict] = {}     # inference: per workload, its replicas' restarts seen so far
        self._workers: dict[str, dict[str, tuple[str, str]]] = {}   # jobs: its pods seen: name → ("worker i", node)
        self._shared: dict | None = None     # inference: one listing of all replicas, and whom it served
        self._checked: dict[str, float] = {}     # inference: per workload, when its Deployment was last read
        self._deployments: dict | None = None    # inference: one listing of their Deployments, and whom it served
        self._node_states: dict[str, tuple[float, str | None]] = {}     # node: (when asked, inventory_state)

    async def poll(self, workload: dict) -> Ended | None:
        """None while it runs (or starts, within the graces); else how it ended, with a reason
        naming the cause read from its pods (docs/launcher-kubernetes.md, "When a pod fails")."""
        await self.ship_logs(workload)        # its output so far, every log_interval (kube_logs.py)
        if workload.get("kind") == "inference":
            return await self._poll_deployment(workload)
        j = await self._read("Job", workload)
        if j is None:
            return Ended(1, f"its Job {name_of(workload)} was deleted outside ComputeHub",
                         self.last_lines(workload), final=True)
        status = j.status
        want = int(j.spec.completions or 1) - int((status.succeeded if status else 0) or 0)
        for c in (status.conditions if status else None) or []:   # a new Job has no status yet
            if c.status == "True" and c.type in ("Complete", "SuccessCriteriaMet"):
                self._workers.pop(workload["id"], None)
                await self._save_logs(workload)
                return Ended(0, "all workers completed", self.last_lines(workload))
            if c.status == "True" and c.type in ("Failed", "FailureTarget"):
                return await self._job_failed(workload, j, c)
        if status is not None and (status.ready or 0) >= want:
            return None          # every worker is up: what goes wrong now fails the Job
        now = time.time()
        for pod, who in await self._job_pods(workload, j):
            trouble = pod_trouble(pod, who, now, pull_grace=self.container_start_grace,
                                  pending_grace=self.unscheduled_grace) or await self._stranded(pod, who, workload)
            if trouble:
                return await self._trouble_ended(workload, trouble)
        return None

    async def _stranded(self, pod: dict, who: str, workload: dict) -> PodTrouble | None:
        """A pod no kubelet has taken yet whose node (its ``nodeName``, else every node it was
        placed on) is deleted or NotReady, as ComputeHub's inventory has it: it will never start,
        so its admission goes back now rather than after ``unscheduled_grace``."""
        if not_started(pod, who, time.time(), 0.0) is None:
            return None
        bound = (pod.get("spec") or {}).get("nodeName")
        nodes = [bound] if bound else sorted(set(placement_nodes(workload)))      # the pod's affinity, as made
        states = {n: await self._node_state(n, max_age=NODE_STATE_TTL) for n in nodes}
        if not nodes or any(st not in STRANDING for st in states.values()):
            return None
        states = {n: await self._node_state(n) for n in nodes}      # confirmed now: it may be back since
        if any(st not in STRANDING for st in states.values()):
            return None
        gone = "; ".join(NODE_GONE[st].format(node=n) for n, st in states.items())
        return PodTrouble(f"{who} cannot start: {gone}", cluster=True)

    async def _job_failed(self, workload: dict, job, cond) -> Ended:
        """The Job failed: the reason is its first troubled worker's (OOMKilled, evicted,
        its node gone), else the Job's own condition (BackoffLimitExceeded, DeadlineExceeded)."""
        said = ": ".join(x for x in (cond.reason, cond.message) if x)
        now = time.time()
        for pod, who in await self._job_pods(workload, job):
            # a pod still waiting to start cannot be why it failed: only ended or disrupted ones
            trouble = pod_trouble(pod, who, now, pull_grace=float("inf"), pending_grace=float("inf"))
            if trouble:
                why = f"{trouble.reason} (the Job failed: {cond.reason or 'Failed'})"
                return await self._trouble_ended(workload, PodTrouble(why, trouble.exit_code, trouble.cluster))
        # the Job's podFailurePolicy fails it on a pod's DisruptionTarget condition
        lost = (cond.reason or "") == "PodFailurePolicy" and "DisruptionTarget" in (cond.message or "")
        here = {pod["metadata"]["name"] for pod, _ in await self._job_pods(workload, job)}
        gone = [(name, seen) for name, seen in self._workers.get(workload["id"], {}).items() if name not in here]
        if not gone and not here and (cond.reason or "") != "DeadlineExceeded":
            # no pod of it left, none ever seen (they came up, or went, between two looks):
            # judged by the nodes it was placed on, as a pod seen there would be
            unseen = [(f"(of Job {name_of(workload)})", (f"worker {i}", a.get("node")))
                      for i, a in enumerate(workload.get("placement") or [])]
            trouble = await self._vanished(unseen, "", only_nodes=True) if unseen else None
            if trouble:
                return await self._trouble_ended(workload, PodTrouble(
                    f"{trouble.reason} (the Job failed: {cond.reason or 'Failed'})", 1, trouble.cluster))
        if gone and (cond.reason or "") != "DeadlineExceeded":
            trouble = await self._vanished(gone, (cond.message or "") if lost else "")
            return await self._trouble_ended(workload, PodTrouble(
                f"{trouble.reason} (the Job failed: {cond.reason or 'Failed'})", 1, trouble.cluster))
        if (cond.reason or "") == "DeadlineExceeded":
            return await self._trouble_ended(workload, PodTrouble(
                f"it ran past its deadline (activeDeadlineSeconds): {said}", 124))
        return await self._trouble_ended(workload, PodTrouble(f"the Job failed: {said}", 1, lost))

    async def _vanished(self, gone: list[tuple[str, tuple[str, str]]], disruption: str,
                        only_nodes: bool = False) -> PodTrouble | None:
        """Why workers' pods vanished (no trace of them left to read): the first whose node is
        deleted, NotReady or drained, as ComputeHub's inventory has it (the launcher's Role may not
        read Nodes), is the cluster's doing (``node_gone``, as the notebook spawner judges its
        pod); else a pod deleted by hand, unless the Job's podFailurePolicy names a disruption
        (``only_nodes``: else None)."""
        states: dict[str, str | None] = {}
        for name, (who, node) in gone:
            if node and node not in states:
                states[node] = await self._node_state(node)
            trouble = node_gone(name, who, node, states.get(node)) if node else None
            if trouble:
                return trouble
        if only_nodes:
            return None
        name, (who, _) = gone[0]
        if disruption:
            return PodTrouble(f"{who}: its pod {name} is gone, disrupted: {disruption}", cluster=True)
        return PodTrouble(f"{who}: its pod {name} is gone (deleted outside ComputeHub, or with its node)")

    def service_client(self):
        """The ComputeHub client of the launcher driving this backend (None outside one)."""
        return getattr(self.parent, "client", None)

    async def _node_state(self, node: str, max_age: float = 0.0) -> str | None:
        """``inventory_state`` of ``node`` from the service (None also when it cannot be learnt);
        an answer at most ``max_age`` seconds old will do (pods waiting to start ask at every look)."""
        known = self._node_states.get(node)
        if known is not None and time.monotonic() - known[0] < max_age:
            return known[1]
        client = self.service_client()
        if client is None:
            return None
        try:
            state = inventory_state(await client.request("GET", f"nodes/{quote(node, safe='')}"))
        except ServiceError as e:
            if e.status != 404:
                self.log.info("could not learn the state of node %s from ComputeHub: %s", node, e)
                return None
            state = inventory_state(None)
        self._node_states[node] = (time.monotonic(), state)
        return state

    async def _trouble_ended(self, workload: dict, trouble: PodTrouble, **extra) -> Ended:
        self._workers.pop(workload["id"], None)
        self._checked.pop(workload["id"], None)
        await self._save_logs(workload)
        lines = self.last_lines(workload)
        self._log(workload, trouble.reason)         # in its log too, after the lines its reason shows
        return Ended(trouble.exit_code, trouble.reason, lines, node_lost=trouble.cluster, **extra)

    async def _pods(self, workload: dict) -> list[dict]:
        """The workload's pods as the API's JSON, oldest first."""
        api = await self.api()
        selector = f"{LABEL_PREFIX}workload={label_value(workload['id'])}"
        pods = await api["core"].list_namespaced_pod(self.namespace, label_selector=selector)
        return _oldest_first(api["client"].sanitize_for_serialization(p) for p in pods.items)

    async def _inference_pods(self, workload: dict) -> list[dict]:
        """A service's pods, oldest first, from one listing of every inference replica in the
        namespace, shared by the services the driver polls in one look: it is made again when a
        service it already served asks again (the next look), so a look lists once, whatever the
        number of services."""
        wid = workload["id"]
        if self._shared is None or wid in self._shared["served"]:
            api = await self.api()
            pods = await api["core"].list_namespaced_pod(self.namespace, label_selector=INFERENCE_PODS)
            by: dict[str, list[dict]] = {}
            for p in pods.items:
                p = api["client"].sanitize_for_serialization(p)
                by.setdefault((p["metadata"].get("labels") or {}).get(f"{LABEL_PREFIX}workload"), []).append(p)
            self._shared = {"pods": by, "served": set()}
        self._shared["served"].add(wid)
        return _oldest_first(self._shared["pods"].get(label_value(wid), []))

    async def deployment(self, workload: dict, use: str):
        """An inference service's Deployment (the client's model; None: there is none), from one
        listing of every inference Deployment in the namespace shared like the pods' listing: made
        again when a service it already served for ``use`` ("poll": the check that it is still
        there; "ready") asks again, so that a look lists once whatever the number of services. One
        missing from the listing (made before it, or without the label) is read to be sure."""
        wid = workload["id"]
        if self._deployments is None or wid in self._deployments[use]:
            api = await self.api()
            found = await api["apps"].list_namespaced_deployment(self.namespace, label_selector=INFERENCE_PODS)
            self._deployments = {"by": {d.metadata.name: d for d in found.items}, "poll": set(), "ready": set()}
        self._deployments[use].add(wid)
        there = self._deployments["by"].get(name_of(workload))
        return there if there is not None else await self._read("Deployment", workload)

    async def _job_pods(self, workload: dict, job) -> list[tuple[dict, str]]:
        """(pod, "worker <index>") of this Job's pods (not an earlier run's, made before it)."""
        made = parse_time(job.metadata.creation_timestamp) or 0
        out = []
        for p in await self._pods(workload):
            if (parse_time(p["metadata"].get("creationTimestamp")) or made) < made:
                continue
            index = (p["metadata"].get("annotations") or {}).get(JOB_INDEX_ANNOTATION)
            out.append((p, f"worker {index}" if index is not None else f"pod {p['metadata']['name']}"))
        # remembered: a worker whose pod vanishes (kubectl delete pod, its node gone) is named when the Job fails
        placed = workload.get("placement") or []
        self._workers.setdefault(workload["id"], {}).update({p["metadata"]["name"]: (who, _node_of(p, placed))
                                                             for p, who in out})
        return out

    async def _poll_deployment(self, workload: dict) -> Ended | None:
        """Kubernetes restarts a crashed replica in place (CrashLoopBackOff) and replaces an
        evicted one: each such restart comes back as ``Ended(restarted=n)``, which the driver
        counts against its ``max_restarts``. A replica whose image cannot be pulled ends it
        (``final``); one never scheduled gives its admission back (``node_lost``)."""
        wid = workload["id"]
        pods = await self._inference_pods(workload)
        now, crashes, why = time.time(), 0, None
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        listed = self._deployments is not None and wid not in self._deployments["poll"]     # since its last look
        if not live or listed or now - self._checked.get(wid, 0.0) >= self.deployment_check_interval:
            if await self.deployment(workload, "poll") is None:
                self._checked.pop(wid, None)
                return Ended(1, f"its Deployment {name_of(workload)} was deleted outside ComputeHub",
                             self.last_lines(workload), final=True)
            self._checked[wid] = now
        seen = self._seen.setdefault(wid, {"restarts": {}, "gone": set()})
        for p in pods:
            name = p["metadata"]["name"]
            who = f"replica {name}"
            trouble = waiting(p, who, now, self.container_start_grace)
            if trouble:
                return await self._trouble_ended(workload, trouble, final=True)
            trouble = not_started(p, who, now, self.unscheduled_grace) or await self._stranded(p, who, workload)
            if trouble:
                return await self._trouble_ended(workload, trouble)
            trouble = disrupted(p, who)
            if trouble and name not in seen["gone"]:
                seen["gone"].add(name)
                crashes, why = crashes + 1, PodTrouble(f"{trouble.reason}; Kubernetes replaced it")
            count = restarts(p)
            if count > seen["restarts"].get(name, 0):
                crashes += count - seen["restarts"].get(name, 0)
                why = last_crash(p, who)
            seen["restarts"][name] = count
        if not crashes:
            return None
        lines = self.last_lines(workload)
        self._log(workload, why.reason)
        return Ended(why.exit_code or 1, why.reason, lines, restarted=crashes)


def _node_of(pod: dict, placement: list[dict]) -> str:
    """The node a worker's pod is bound to, else the one ComputeHub placed its index on."""
    node = (pod.get("spec") or {}).get("nodeName")
    index = (pod["metadata"].get("annotations") or {}).get(JOB_INDEX_ANNOTATION)
    if not node and index is not None and index.isdigit() and int(index) < len(placement):
        node = placement[int(index)].get("node")
    return node or ""


def _oldest_first(pods) -> list[dict]:
    return sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
