"""The Kubernetes launcher backend: admitted work as Jobs and Deployments (docs/launcher-kubernetes.md).

``KubeLauncher`` implements ``launch_base.LauncherBackend`` for the launcher driver
(``computehub-launcher --backend spawner.launch_kube.KubeLauncher``):

- ``training`` / ``batch``: a ``batch/v1`` Job; more than one worker makes it an
  Indexed Job (parallelism = completions = workers) with a headless Service, and
  MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK for torchrun-style launch;
- ``inference``: a Deployment and a Service, ready when its readiness probe passes.

The manifests (spawner/kube_manifests.py) copy the owner's notebook pod (image,
home volume, security context; found by label, used only if its annotations name
exactly the owner), carry the placement, the GPU limit, the class's
PriorityClass and the workload's labels. Stopping deletes the pods with
``grace_seconds`` (SIGTERM, then SIGKILL), then the objects.
"""

from __future__ import annotations

import asyncio
import os

from traitlets import Bool, Dict, Enum, Integer, Unicode, default

from .kube import LABEL_PREFIX, label_value
from .kube_client import api_client
from .kube_failures import disrupted, restarts
from .kube_logs import PodLogs
from .kube_manifests import (RUN_ANNOTATION, SUFFIXES, Settings, describe, endpoint_of, inference_manifests,
                             name_of, owned_by, placement_nodes, run_of, template_from, training_manifests)
from .kube_watch import PodWatch
from .launch_base import Ended, LaunchError, StartLater, job_of
from .launcher_settings import KubeLauncherChecks
from .options import OptionsError

KIND_API = {"Job": ("batch", "namespaced_job"), "Deployment": ("apps", "namespaced_deployment"),
            "Service": ("core", "namespaced_service"), "ConfigMap": ("core", "namespaced_config_map"),
            "Secret": ("core", "namespaced_secret"),
            "NetworkPolicy": ("networking", "namespaced_network_policy")}
REPLACE_WAIT = 30.0     # seconds a start waits for an earlier run's objects to go before trying later


class KubeLauncher(KubeLauncherChecks, PodWatch, PodLogs):
    """Runs admitted workloads as Kubernetes Jobs (training, batch) and Deployments (inference)."""

    namespace = Unicode(config=True, help="Namespace of the jobs (default: $POD_NAMESPACE, else 'default').")
    kubeconfig = Unicode("", config=True, help="""Kubeconfig file to use outside a cluster ('' = in-cluster
        configuration, else $KUBECONFIG / ~/.kube/config).""")
    notebook_selector = Unicode("component=singleuser-server", config=True,
                                help="""Label selector (with computehub/user=<user>) of the user's notebook pod,
        whose image, home volume and security context a job copies.""")
    default_image = Unicode("quay.io/jupyter/base-notebook:latest", config=True,
                            help="Image of a job whose owner has no notebook pod running.")
    default_home = Unicode("/home/jovyan", config=True, help="Home folder in the image, for such jobs.")
    gpu_resource = Unicode("nvidia.com/gpu", config=True, help="Extended resource name of a GPU.")
    priority_class_names = Dict(Unicode(), config=True,
                                help="ComputeHub priority class → PriorityClass name (else priority_class_template).")
    priority_class_template = Unicode("computehub-{priority}", config=True,
                                      help="PriorityClass name for other classes ('{priority}'); '' = none.")
    termination_grace_seconds = Integer(30, config=True, help="""terminationGracePeriodSeconds of job pods:
        seconds between SIGTERM and SIGKILL when a pod is deleted (preemption: save a checkpoint).""")
    master_port = Integer(29500, config=True, help="MASTER_PORT of multi-worker jobs (rank 0 listens there).")
    inference_port = Integer(8080, config=True, help="Port an inference service listens on when it names none.")
    pod_computehub_url = Unicode(config=True, help="""$COMPUTEHUB_URL in job pods: where a job reaches the
        service to report its own checkpoints (`computehub checkpoint`, with $COMPUTEHUB_REPORT_TOKEN).
        Default: the launcher's own service URL (both run in the cluster); '' = not set.""")
    checkpoint_dir_template = Unicode("{home}/.computehub/checkpoints/{id}", config=True,
                                      help="""$COMPUTEHUB_CHECKPOINT_DIR of a job ({home}: the home volume's
        mount path, {id}: workload id); on the home volume it survives a preemption.""")

    network_policy = Bool(False, config=True, help="""Create a NetworkPolicy per workload (named like it)
        letting its pods reach each other and nothing else. Only with a policy that isolates every job pod
        and lets in what else they need (the chart's, networkPolicy.enabled): alone it cuts them off.""")

    pod_security = Enum(["baseline", "restricted"], "baseline", config=True, help="""The Pod Security Standards
        level job pods meet. baseline: a job pod may do what its owner's notebook pod may (whose security
        context it copies), never run privileged or escalate. restricted: also what a namespace enforcing
        the restricted level admits: the runtime's default seccomp profile, ALL capabilities dropped, not
        root, filled in where the notebook leaves them unsaid; a job whose notebook runs as root or adds
        capabilities is refused with the reason (instead of the API server's 403).""")

    @default("pod_computehub_url")
    def _pod_computehub_url(self):
        return self.launcher_service_url()

    @default("namespace")
    def _namespace(self):
        return os.environ.get("POD_NAMESPACE", "default")

    _api = None

    async def api(self):
        """(CoreV1Api, BatchV1Api, AppsV1Api, NetworkingV1Api) on one client, configured once."""
        if self._api is None:
            from kubernetes_asyncio import client
            c = await api_client(self.kubeconfig)
            self._api = {"core": client.CoreV1Api(c), "batch": client.BatchV1Api(c), "apps": client.AppsV1Api(c),
                         "networking": client.NetworkingV1Api(c), "client": c}
        return self._api

    def settings(self, workload: dict) -> Settings:
        prio = workload.get("priority") or ""
        pclass = self.priority_class_names.get(prio) or (
            self.priority_class_template.format(priority=prio) if self.priority_class_template and prio else "")
        return Settings(namespace=self.namespace, gpu_resource=self.gpu_resource, priority_class=pclass,
                        grace_seconds=self.termination_grace_seconds, master_port=self.master_port,
                        inference_port=self.inference_port, computehub_url=self.pod_computehub_url,
                        checkpoint_dir_template=self.checkpoint_dir_template, default_image=self.default_image,
                        default_home=self.default_home, network_policy=self.network_policy,
                        pod_security=self.pod_security)

    async def notebook_pod(self, user: str) -> dict | None:
        api = await self.api()
        selector = ",".join(filter(None, [self.notebook_selector, f"{LABEL_PREFIX}user={label_value(user)}"]))
        pods = await api["core"].list_namespaced_pod(self.namespace, label_selector=selector)
        found = [api["client"].sanitize_for_serialization(p)
                 for p in pods.items if not p.metadata.deletion_timestamp]
        mine = [p for p in found if owned_by(p, user)]
        for p in found:
            if p not in mine:       # its home volume and image are someone else's, or unproven
                self.log.warning("Pod %s has user %r's label but is not theirs: not a template of their jobs",
                                 p["metadata"].get("name"), user)
        return mine[0] if mine else None

    def manifests(self, workload: dict, notebook: dict | None) -> list[dict]:
        job = job_of(workload)
        s = self.settings(workload)
        t = template_from(notebook, s)
        try:
            if workload.get("kind") == "inference":
                return inference_manifests(workload, job, t, s)
            return training_manifests(workload, job, t, s)
        except OptionsError as e:
            raise LaunchError(str(e)) from None

    async def _create(self, manifest: dict) -> bool:
        """Create one object: True, or False when one of that name is there already."""
        from kubernetes_asyncio.client.exceptions import ApiException
        group, what = KIND_API[manifest["kind"]]
        api = (await self.api())[group]
        try:
            await getattr(api, f"create_{what}")(self.namespace, manifest)
        except ApiException as e:
            if e.status == 409:
                return False
            raise LaunchError(f"Kubernetes refused the {manifest['kind']} {manifest['metadata']['name']}: "
                              f"{e.status} {e.reason}") from None
        return True

    async def start(self, workload: dict) -> dict:
        self._seen.pop(workload["id"], None)         # a new run: its replicas' restarts count from 0
        self._workers.pop(workload["id"], None)
        notebook = await self.notebook_pod(workload["user"])
        objs = self.manifests(workload, notebook)
        main = next(m for m in objs if m["kind"] in ("Job", "Deployment"))
        for m in objs:
            if not await self._create(m):
                if m is main:
                    await self._replace_earlier_run(workload, objs, main)
                elif m["kind"] == "Secret":     # an earlier run's: its report token is void now
                    await self._replace_secret(m)
        kinds = ", ".join(f"{m['kind']} {m['metadata']['name']}" for m in objs)
        nodes = ",".join(placement_nodes(workload)) or "?"
        pod = main["spec"]["template"]["spec"]
        self._log(workload, f"created {kinds} in {self.namespace} on {nodes}: "
                            f"{describe(pod['containers'][0]['command'])}")
        return {"node": nodes, "message": f"{kinds} on {nodes}"
                + (f" (like {notebook['metadata']['name']})" if notebook else " (default image)")}

    async def _replace_earlier_run(self, workload: dict, objs: list[dict], main: dict) -> None:
        """The workload's Job (Deployment) is there already. Made by this run (a start retried
        after a launcher restart), it is kept. Made by an earlier run whose removal failed (the
        API was down when it ended), it would be read as this run, ended: so what that run left
        is deleted and this run's objects are made again; if the old objects take longer than
        ``REPLACE_WAIT`` to go, the start is tried again at a later look (``StartLater``)."""
        kind, name = main["kind"], main["metadata"]["name"]
        there = await self._read(kind, workload)
        if there is not None and _made_by(there) == run_of(workload):
            return
        if there is not None:
            self._log(workload, f"an earlier run's {kind} {name} was still there: replaced")
            await self._delete_objects(workload)
            deadline = asyncio.get_running_loop().time() + REPLACE_WAIT
            while await self._read(kind, workload) is not None:
                if asyncio.get_running_loop().time() > deadline:
                    raise StartLater(f"an earlier run's {kind} {name} is still being deleted")
                await asyncio.sleep(0.5)
        for m in objs:
            if not await self._create(m) and m is main:
                raise StartLater(f"an earlier run's {kind} {name} came back while it was replaced")

    async def _replace_secret(self, manifest: dict) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException
        group, what = KIND_API["Secret"]
        meta = manifest["metadata"]
        body = {"metadata": {"labels": meta.get("labels"), "annotations": meta.get("annotations")},
                "stringData": manifest["stringData"]}
        try:
            await getattr((await self.api())[group], f"patch_{what}")(
                meta["name"], self.namespace, body, _content_type="application/merge-patch+json")
        except ApiException as e:
            raise LaunchError(f"Kubernetes refused to replace the Secret {manifest['metadata']['name']}: "
                              f"{e.status} {e.reason}") from None

    async def _read(self, kind: str, workload: dict):
        from kubernetes_asyncio.client.exceptions import ApiException
        group, what = KIND_API[kind]
        try:
            return await getattr((await self.api())[group], f"read_{what}")(name_of(workload), self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def ready(self, workload: dict) -> str | None:
        d = await self.deployment(workload, "ready")
        if d is None or not d.status or (d.status.ready_replicas or 0) < (d.spec.replicas or 1):
            return None
        return endpoint_of(workload, self.settings(workload))

    async def stop(self, workload: dict, grace_seconds: float) -> Ended | None:
        """SIGTERM through pod deletion with ``grace_seconds``, then delete the objects."""
        api = await self.api()
        from kubernetes_asyncio.client.exceptions import ApiException
        selector = f"{LABEL_PREFIX}workload={label_value(workload['id'])}"
        pods = await api["core"].list_namespaced_pod(self.namespace, label_selector=selector)
        await self._save_logs(workload)
        for p in pods.items:
            try:
                await api["core"].delete_namespaced_pod(p.metadata.name, self.namespace,
                                                        grace_period_seconds=int(grace_seconds))
            except ApiException as e:
                if e.status != 404:
                    raise
        await self._delete_objects(workload)
        await self._until_gone(workload, selector, grace_seconds)
        self.forget_logs(workload)
        self._log(workload, f"stopped: pods deleted with {grace_seconds:g} s grace")
        return Ended(143, f"stopped (SIGTERM, {grace_seconds:g} s grace)", self.last_lines(workload))

    async def _until_gone(self, workload: dict, selector: str, grace_seconds: float) -> None:
        """Wait until no pod of the workload is left. A deleted pod stays (terminating) until its
        kubelet has stopped its containers, and its GPUs stay its own till then: the kubelet
        would refuse a pod bound to them ("UnexpectedAdmissionError"). So "stopped" is reported,
        and the GPUs go to other work, only once the pods are gone. A pod on a node that stopped
        answering stays until the node is deleted; the service's stop_deadline bounds the wait
        of the work that waits for it meanwhile."""
        api = await self.api()
        every, said = 0.5, asyncio.get_running_loop().time() + max(60.0, 2 * grace_seconds)
        while (left := (await api["core"].list_namespaced_pod(self.namespace, label_selector=selector)).items):
            await self.ship_logs(workload)         # what its SIGTERM handler says while it stops
            if asyncio.get_running_loop().time() > said:
                self.log.warning("%s: %d pod(s) still terminating (%s), their GPUs still theirs", workload["id"],
                                 len(left), ", ".join(f"{p.metadata.name} on {p.spec.node_name or '-'}" for p in left))
                said += 300
            await asyncio.sleep(every)
            every = min(2 * every, 10.0)

    async def cleanup(self, workload: dict) -> None:
        """A Job that ended by itself is deleted with what belongs to it (its logs are saved):
        its report token's Secret does not linger, and a job requeued after its node was lost
        gets a fresh Job rather than the failed one (whose name it would otherwise meet)."""
        await self._delete_objects(workload)
        self.forget_logs(workload)

    async def _delete_objects(self, workload: dict) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException
        api = await self.api()
        for kind in KIND_API:
            if kind == "NetworkPolicy" and not self.network_policy:
                continue            # none made (and the chart's Role then grants nothing on them)
            group, what = KIND_API[kind]
            name = name_of(workload) + SUFFIXES.get(kind, "")
            try:
                await getattr(api[group], f"delete_{what}")(name, self.namespace, propagation_policy="Background")
            except ApiException as e:
                if e.status != 404:
                    raise

    async def adopt(self, workload: dict) -> bool:
        """Its Job (Deployment) is there and was made by this run: one an earlier run left is
        not this run's (``start`` replaces it). One without the annotation, made by a launcher
        from before it, is adopted, so that an upgrade keeps what runs."""
        kind = "Deployment" if workload.get("kind") == "inference" else "Job"
        there = await self._read(kind, workload)
        mine = there is not None and _made_by(there) in (None, run_of(workload))
        if mine and kind == "Job":              # its workers' pods, named if they vanish later
            await self._job_pods(workload, there)
        if mine and kind == "Deployment":       # restarts before now were counted by the launcher before
            pods = await self._pods(workload)
            self._seen[workload["id"]] = {"restarts": {p["metadata"]["name"]: restarts(p) for p in pods},
                                          "gone": {p["metadata"]["name"] for p in pods if disrupted(p, "")}}
        return mine

    async def restart(self, workload: dict) -> dict:
        await self.stop(workload, 0)
        return await self.start(workload)

    async def close(self) -> None:
        if self._api is not None:
            await self._api["client"].close()
            self._api = None

    # --- logs: what the service serves at GET workloads/{id}/logs ------------------------------

    def _log(self, workload: dict, line: str) -> None:
        os.makedirs(self.logs_dir, exist_ok=True)
        with open(self.log_path(workload), "a") as f:
            f.write(f"[computehub] {line}\n")

    async def _save_logs(self, workload: dict) -> None:
        """What the pods wrote since the last read, once it has ended or is stopped (kube_logs.py)."""
        await self.ship_logs(workload, final=True)


def _made_by(obj) -> str | None:
    """The run that made an object read from the API (its ``computehub/run``), if it says."""
    return ((obj.metadata.annotations if obj.metadata else None) or {}).get(RUN_ANNOTATION)
