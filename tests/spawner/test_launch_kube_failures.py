"""What the Kubernetes launcher reports when a job's or a service's pods fail (docs/launcher-kubernetes.md,
"When a pod fails"): the reason names the cause, the end is reported (failed, or node_lost so that
the service requeues it), and what is left in the cluster is removed.

Real: the launcher driver (LauncherApp, its reconcile loop) with the KubeLauncher backend, talking
HTTP to the Kubernetes API through a kubeconfig. Emulated: the Kubernetes API (kmock,
tests/spawner/kmock_cluster.py); the job controller (tests/spawner/kube_controllers.py makes a
Job's pods); the ReplicaSet controller (the test makes a Deployment's pod); the kubelet, the
kube-scheduler and the node lifecycle controller (the test writes the pod and Job status they
would write: a waiting reason, a terminated container, a DisruptionTarget condition, an
unschedulable condition). The service is replaced by a recorder of the driver's reports
(tests/spawner/launcher_alone.py): what the service does with them is tested elsewhere
(tests/spawner/test_launch_kube_failures_hub.py end to end).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kmock_cluster import KmockCluster  # noqa: E402
from kube_controllers import JobController, create, patch_status  # noqa: E402
from launcher_alone import recording_launcher  # noqa: E402

from spawner.launch_kube import KubeLauncher  # noqa: E402

NS = "hub"
GI = 2**30


@pytest.fixture
def cluster(tmp_path):
    with KmockCluster(tmp_path) as c:
        c.controllers.append(JobController(c))
        c.kubeconfig = str(c.write_kubeconfig(tmp_path / "kubeconfig", NS))
        yield c
        c.check()


def workload(wid: str, kind: str = "training", workers: int = 1) -> dict:
    nodes = ["kube-gpu-1", "kube-gpu-2"][:workers] if workers > 1 else ["kube-gpu-1"]
    return {"id": wid, "user": "alice", "queue": "vision", "kind": kind, "priority": kind, "workers": workers,
            "resources": {"gpu": 1, "cpu": "4000m", "memory": 8 * GI},
            "placement": [{"node": n, "gpus": [0]} for n in nodes], "admitted_at": 1000.0, "state": "admitted",
            "metadata": {"job": {"command": ["python", "serve.py" if kind == "inference" else "train.py"]}}}


class Driver:
    """The launcher driver against the emulated cluster; the service is a dict of what it holds
    and a list of the reports it got."""

    def __init__(self, cluster: KmockCluster, tmp_path: Path, max_restarts: int = 3, **backend):
        self.cluster = cluster
        self.backend = KubeLauncher(namespace=NS, kubeconfig=cluster.kubeconfig, logs_dir=str(tmp_path), **backend)
        self.app, self.reports = recording_launcher(self.backend)
        self.app.max_restarts = max_restarts
        self.held: dict[str, dict] = {}
        record = self.app.report

        async def report(wid, state, **extra):
            if state in ("running",):
                self.held[wid] = {**self.held[wid], "state": "running"}
            if state in ("finished", "failed", "stopped"):
                self.held.pop(wid, None)          # the service no longer holds it
            return await record(wid, state, **extra)

        async def holding():
            return dict(self.held)

        self.app.report, self.app.holding = report, holding

    async def look(self, times: int = 1) -> None:
        for _ in range(times):
            await self.app.reconcile()
            await asyncio.sleep(0.1)      # the driver's own tasks (start, end reports) run

    async def until(self, what: str, fn, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await self.look()
            v = fn()
            if v:
                return v
        raise AssertionError(f"timed out waiting for {what}; reports: {self.reports}")

    async def admit(self, w: dict) -> None:
        self.held[w["id"]] = w
        await self.until("running", lambda: self.state("running"))

    def state(self, state: str) -> dict | None:
        return next((extra for s, extra in self.reports if s == state), None)

    async def kube(self, coro):
        """Run ``coro`` (a write to the emulated API) on the emulator's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.cluster.loop))

    async def request(self, method: str, path: str, **kw) -> None:
        """What kubectl would send (delete, patch) to the emulated API."""
        async def send():
            async with getattr(self.cluster.emulator, method)(path, **kw) as r:
                r.raise_for_status()
        await self.kube(send())

    def pods(self, wid: str) -> list[dict]:
        return self.objects("pods", wid)

    def objects(self, plural: str, wid: str) -> list[dict]:
        return [o for o in self.cluster.objects(plural, NS)
                if o["metadata"]["labels"].get("computehub/workload") == wid]

    async def pod_status(self, name: str, status: dict) -> None:
        await self.kube(self.cluster.patch_pod_status(NS, name, status))

    async def job_status(self, wid: str, status: dict) -> None:
        await self.kube(patch_status(self.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{wid}/status", status))

    async def worker(self, wid: str, index: int) -> str:
        pods = await self.until(f"worker {index}'s pod", lambda: [
            p for p in self.pods(wid)
            if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == str(index)])
        return pods[0]["metadata"]["name"]

    async def replica(self, wid: str, name: str) -> str:
        """Make a replica of the workload's Deployment, as its ReplicaSet would."""
        [dep] = await self.until("the Deployment", lambda: self.objects("deployments", wid))
        t = dep["spec"]["template"]
        await self.kube(create(self.cluster, f"/api/v1/namespaces/{NS}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": t["metadata"]["labels"]},
            "spec": t["spec"]}))
        return name

    async def close(self):
        await self.backend.close()


def scenario(cluster, tmp_path, body, **kw):
    async def run():
        d = Driver(cluster, tmp_path, **kw)
        try:
            await body(d)
        finally:
            await d.close()
    asyncio.run(run())


def waiting_status(reason: str, message: str, image: str = "quay.io/jupyter/base-notebook:latest") -> dict:
    return {"phase": "Pending", "hostIP": "10.0.0.1", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": image, "imageID": "",
        "state": {"waiting": {"reason": reason, "message": message}}}]}


def test_an_image_that_cannot_be_pulled_fails_the_job_after_the_grace_naming_the_image(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wpull0001")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.pod_status(pod, waiting_status(
            "ErrImagePull", 'rpc error: code = NotFound desc = failed to pull "quay.io/jupyter/base-notebook:latest"'))
        await d.look(3)
        assert d.state("failed") is None, d.reports        # within container_start_grace: it may recover
        d.backend.container_start_grace = 0
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith("worker 0: image 'quay.io/jupyter/base-notebook:latest' could not be "
                                           "pulled: ErrImagePull: rpc error: code = NotFound"), failed
        assert failed["exit_code"] == 1 and not failed.get("node_lost")
        await d.until("the Job removed", lambda: not d.objects("jobs", w["id"]))
    scenario(cluster, tmp_path, body, container_start_grace=3600)


def test_a_missing_secret_fails_the_job_naming_it(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wconf0001")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.pod_status(pod, waiting_status("CreateContainerConfigError", 'secret "db-creds" not found'))
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith("worker 0: container 'worker' could not be created: "
                                           'CreateContainerConfigError: secret "db-creds" not found'), failed
    scenario(cluster, tmp_path, body, container_start_grace=0)


def test_an_oomkilled_worker_is_named_with_its_memory_limit(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("woom00001", workers=2)
        await d.admit(w)
        await d.worker(w["id"], 0)
        pod = await d.worker(w["id"], 1)
        await d.pod_status(pod, {"phase": "Failed", "hostIP": "10.0.0.2", "containerStatuses": [{
            "name": "worker", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
        await d.job_status(w["id"], {"failed": 1, "conditions": [{
            "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit"}]})
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith("worker 1 was OOMKilled (memory limit 8Gi) "
                                           "(the Job failed: BackoffLimitExceeded)"), failed
        assert failed["exit_code"] == 137 and not failed.get("node_lost")
    scenario(cluster, tmp_path, body)


def test_a_failed_worker_and_a_deadline_are_told_apart(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wexit0001")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.pod_status(pod, {"phase": "Failed", "hostIP": "10.0.0.1", "containerStatuses": [{
            "name": "worker", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]})
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith("worker 0 exited with code 3 (Error)") and failed["exit_code"] == 3, failed

        d.reports.clear()
        w = workload("wdead0001")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.pod_status(pod, {"phase": "Running", "hostIP": "10.0.0.1", "containerStatuses": [{
            "name": "worker", "ready": True, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"running": {}}}]})
        await d.job_status(w["id"], {"failed": 1, "conditions": [{
            "type": "Failed", "status": "True", "reason": "DeadlineExceeded",
            "message": "Job was active longer than specified deadline"}]})
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith("it ran past its deadline (activeDeadlineSeconds): DeadlineExceeded: "
                                           "Job was active longer than specified deadline"), failed
        assert failed["exit_code"] == 124
    scenario(cluster, tmp_path, body)


@pytest.mark.parametrize("condition,status,words", [
    ({"reason": "TerminationByKubelet", "message": "Pod was evicted"},
     {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory. "
                                                         "Threshold quantity: 100Mi, available: 50Mi."},
     "worker 0: evicted from node kube-gpu-1 by its kubelet: The node was low on resource: memory."),
    ({"reason": "PreemptionByScheduler", "message": "hub/big-pod on node kube-gpu-1"}, {"phase": "Running"},
     "worker 0: preempted by the kube-scheduler on node kube-gpu-1 (a pod of higher priority)"),
    ({"reason": "DeletionByPodGC", "message": "PodGC: node no longer exists"}, {"phase": "Running"},
     "worker 0: its node kube-gpu-1 went away (deleted from the cluster): PodGC: node no longer exists"),
    ({"reason": "DeletionByTaintManager", "message": "Taint manager: deleting due to NoExecute taint"},
     {"phase": "Running"}, "worker 0: its node kube-gpu-1 went away (NotReady or unreachable, its pods evicted)"),
], ids=["evicted", "preempted-by-kube-scheduler", "node-deleted", "node-not-ready"])
def test_a_disrupted_pod_gives_the_admission_back_naming_the_cause(cluster, tmp_path, condition, status, words):
    """The cluster, not the job, ended the pod: reported node_lost (the service requeues work
    whose class requeues), before the Job controller even fails the Job."""
    async def body(d: Driver):
        w = workload("wdis00001")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.pod_status(pod, {**status, "nodeName": "kube-gpu-1", "conditions": [
            {"type": "DisruptionTarget", "status": "True", **condition}]})
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"node lost: {words}"), failed
        assert failed["node_lost"] is True
        await d.until("the Job removed (a requeued run starts afresh)", lambda: not d.objects("jobs", w["id"]))
    scenario(cluster, tmp_path, body)


def test_a_pod_never_scheduled_gives_the_admission_back_after_the_grace(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wsch00001", workers=2)          # two nodes: placed by the kube-scheduler (affinity)
        await d.admit(w)
        for index in (0, 1):
            pod = await d.worker(w["id"], index)
            await d.pod_status(pod, {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 2 node(s) had untolerated taint {gpu: reserved}."}]})
        await d.look(2)
        assert d.state("failed") is None, d.reports
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["node_lost"] is True
        assert failed["reason"].startswith("node lost: worker 0 was not scheduled for "), failed
        assert "(Unschedulable: 0/3 nodes are available: 2 node(s) had untolerated taint {gpu: reserved}.)" \
            in failed["reason"], failed
    scenario(cluster, tmp_path, body, unscheduled_grace=2)


def test_a_pod_its_node_never_starts_gives_the_admission_back(cluster, tmp_path):
    """One worker is bound to its node (nodeName); a node that is gone or NotReady never takes it."""
    async def body(d: Driver):
        w = workload("wnod00001")
        await d.admit(w)
        await d.worker(w["id"], 0)                    # Pending, no kubelet ever reports on it
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["node_lost"] is True
        assert "worker 0 was not started by node kube-gpu-1 for " in failed["reason"], failed
    scenario(cluster, tmp_path, body, unscheduled_grace=1)


def test_a_job_or_its_pod_deleted_by_hand_ends_it_saying_so(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wdel00001")
        await d.admit(w)
        await d.worker(w["id"], 0)
        await d.request("delete", f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{w['id']}")
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"its Job ch-{w['id']} was deleted outside ComputeHub"), failed

        d.reports.clear()
        w = workload("wdel00002")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.look(2)
        await d.request("delete", f"/api/v1/namespaces/{NS}/pods/{pod}")      # kubectl delete pod
        # the job controller counts the deleted pod failed; with backoffLimit 0 the Job fails
        await d.job_status(w["id"], {"failed": 1, "conditions": [{
            "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit"}]})
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"worker 0: its pod {pod} is gone (deleted outside ComputeHub, or "
                                           "with its node) (the Job failed: BackoffLimitExceeded)"), failed
    scenario(cluster, tmp_path, body)


def test_an_inference_image_that_cannot_be_pulled_fails_it_without_restarts(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("winf00001", kind="inference")
        await d.admit(w)
        [dep] = d.objects("deployments", w["id"])
        pod = await d.replica(w["id"], f"ch-{w['id']}-5d8f-abcde")
        await d.pod_status(pod, waiting_status("InvalidImageName", 'invalid reference format: "Foo:bar"',
                                               image="Foo:bar"))
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"replica {pod}: image 'quay.io/jupyter/base-notebook:latest' could not "
                                           "be pulled: InvalidImageName"), failed
        assert d.state("update") is None, d.reports      # not restarted: a new Deployment would fail the same
        assert dep["metadata"]["uid"] not in [o["metadata"]["uid"] for o in d.objects("deployments", w["id"])]
    scenario(cluster, tmp_path, body)


def crash_status(restarts: int, reason: str = "Error", code: int = 1) -> dict:
    return {"phase": "Running", "hostIP": "10.0.0.1", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": restarts, "image": "x", "imageID": "",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": code, "reason": reason}}}]}


def test_an_inference_crash_loop_is_counted_and_ends_it_past_max_restarts(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wcrash001", kind="inference")
        await d.admit(w)
        [dep] = d.objects("deployments", w["id"])
        pod = await d.replica(w["id"], f"ch-{w['id']}-5d8f-abcde")
        await d.pod_status(pod, crash_status(1))
        first = await d.until("the first restart counted", lambda: d.state("update"))
        assert first["restarts"] == 1 and first["ready"] is False
        assert first["message"] == (f"restarted after: replica {pod} exited with code 1 (Error); "
                                    "CrashLoopBackOff (1/2)"), first
        await d.pod_status(pod, crash_status(2, "OOMKilled", 137))
        await d.until("the second", lambda: [e for s, e in d.reports if s == "update" and e.get("restarts") == 2])
        await d.look(2)
        assert [e["restarts"] for s, e in d.reports if s == "update"] == [1, 2], d.reports    # each counted once
        # Kubernetes restarted it in place: the launcher made no new Deployment
        assert [o["metadata"]["uid"] for o in d.objects("deployments", w["id"])] == [dep["metadata"]["uid"]]
        await d.pod_status(pod, crash_status(3))
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"replica {pod} exited with code 1 (Error); CrashLoopBackOff; "
                                           "it crashed 3 times, more than max_restarts (2)"), failed
        await d.until("the Deployment removed", lambda: not d.objects("deployments", w["id"]))
    scenario(cluster, tmp_path, body, max_restarts=2)


def test_an_inference_deployment_deleted_by_hand_is_not_made_again(cluster, tmp_path):
    async def body(d: Driver):
        w = workload("wdeld0001", kind="inference")
        await d.admit(w)
        await d.request("delete", f"/apis/apps/v1/namespaces/{NS}/deployments/ch-{w['id']}")
        failed = await d.until("failed", lambda: d.state("failed"))
        assert failed["reason"].startswith(f"its Deployment ch-{w['id']} was deleted outside ComputeHub"), failed
        assert d.state("update") is None and not d.objects("deployments", w["id"]), d.reports
    scenario(cluster, tmp_path, body)


def test_a_restarted_launcher_counts_only_the_crashes_after_it_adopted(cluster, tmp_path):
    """Restarts before a launcher restart were counted (and reported) by the launcher before."""
    async def body(d: Driver):
        w = workload("wadopt001", kind="inference")
        await d.admit(w)
        pod = await d.replica(w["id"], f"ch-{w['id']}-5d8f-abcde")
        await d.pod_status(pod, crash_status(2))
        fresh = KubeLauncher(namespace=NS, kubeconfig=d.cluster.kubeconfig, logs_dir=str(tmp_path))
        try:
            assert await fresh.adopt(w) is True
            assert await fresh.poll(w) is None
            await d.pod_status(pod, crash_status(3, "OOMKilled", 137))
            ended = await fresh.poll(w)
            assert ended.restarted == 1 and ended.exit_code == 137, ended
            assert ended.reason == f"replica {pod} was OOMKilled (memory limit 8Gi); CrashLoopBackOff", ended
        finally:
            await fresh.close()
    scenario(cluster, tmp_path, body)
