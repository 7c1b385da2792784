"""Stand-ins for what a cluster runs beside its API server, for tests against the emulated
Kubernetes API (kmock_cluster.py), which has no controllers: the job controller (one pod per
completion index of each new Job, named as the real one names them) and the garbage
collector (a deleted Job's pods go too, as with propagation ``Background``); and what a test
writes as those controllers and the kubelet would (``create``, ``patch_status``)."""

from __future__ import annotations

from kmock_cluster import KmockCluster

GC = "emulated-garbage-collector"      # marks the deletes below, told apart from the launcher's


class JobController:
    """Plays the job controller: one pod per completion index of each new Job, named as the
    real one names them (``<job>-<index>-<random>``, here from the Job's uid); and the garbage
    collector: a deleted Job's pods go too (propagation ``Background``)."""

    def __init__(self, cluster: KmockCluster):
        self.cluster = cluster
        self.seen: dict[str, list[tuple[str, str]]] = {}    # Job uid -> its pods (namespace, name)

    async def __call__(self):
        live = set()
        for (res, ns, name), obj in list(self.cluster.emulator.objects.items()):
            if res.plural != "jobs" or obj.deleted:
                continue
            uid = obj.raw["metadata"]["uid"]
            live.add(uid)
            if uid not in self.seen:
                self.seen[uid] = await self._pods_for(obj.raw, ns, name)
        for uid in [u for u in self.seen if u not in live]:
            for ns, pod in self.seen.pop(uid):
                async with self.cluster.emulator.delete(f"/api/v1/namespaces/{ns}/pods/{pod}",
                                                        params={"by": GC}) as r:
                    if r.status != 404:
                        r.raise_for_status()

    async def _pods_for(self, job: dict, ns: str, name: str) -> list[tuple[str, str]]:
        tmpl, made = job["spec"]["template"], []
        for i in range(job["spec"].get("completions", 1)):
            pod_name = f"{name}-{i}-{job['metadata']['uid'][:5]}"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "namespace": ns,
                                "labels": dict(tmpl["metadata"]["labels"], **{"job-name": name}),
                                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}},
                   "spec": dict(tmpl["spec"], hostname=f"{name}-{i}")}
            async with self.cluster.emulator.post(f"/api/v1/namespaces/{ns}/pods", json=pod) as r:
                r.raise_for_status()
            made.append((ns, pod_name))
        return made


async def create(cluster: KmockCluster, path: str, body: dict) -> None:
    """POST an object to the emulated API (``path``: its collection, e.g. /api/v1/namespaces/x/pods)."""
    async with cluster.emulator.post(path, json=body) as r:
        r.raise_for_status()


async def patch_status(cluster: KmockCluster, path: str, status: dict) -> None:
    """Write an object's status as its controller would (a merge patch of ``path``/status)."""
    async with cluster.emulator.patch(path, json={"status": status},
                                      headers={"Content-Type": "application/merge-patch+json"}) as r:
        r.raise_for_status()


def pod_deletes(cluster: KmockCluster, prefix: str) -> list:
    """The DELETE requests for pods whose names start with ``prefix``, but the emulated garbage
    collector's: those the launcher made."""
    return cluster.call(lambda: [rq for rq in cluster.emulator
                                 if rq.method == "DELETE" and rq.resource is not None
                                 and rq.resource.plural == "pods" and (rq.name or "").startswith(prefix)
                                 and rq.params.get("by") != GC])


def bare_job(name: str, workload_id: str, annotations: dict | None = None) -> dict:
    """A minimal Job of a workload, as something other than this launcher run left it."""
    labels = {"computehub/workload": workload_id}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "spec": {"completions": 1, "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "job", "image": "x"}]}}}}
