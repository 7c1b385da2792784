"""The Kubernetes launcher end to end (issue 5): admitted work becomes Jobs and Deployments.

Real: JupyterHub + proxy + the ComputeHub service, and the launcher driver
(computehub-launcher, the hub's managed service) with the KubeLauncher backend,
talking HTTP to the Kubernetes API through a kubeconfig. Emulated: the
Kubernetes API (kmock, tests/spawner/kmock_cluster.py), and the controllers
and kubelet: tests/spawner/kube_controllers.py creates a Job's pods and deletes
a deleted Job's pods (as the job controller and garbage collector would), and
the tests set Job and Deployment status; the GPU nodes are declared ("kube-gpu-1",
"kube-gpu-2", 4 A100 each). Every manifest the launcher creates passes
kubernetes-validate --strict for a pinned, bundled Kubernetes version.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path

import pytest
from kubernetes_validate.utils import all_versions, validate

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helm"))
from kube_controllers import bare_job, create, patch_status, pod_deletes  # noqa: E402
from kube_hubs import launcher_hub  # noqa: E402
from kube_launch_helpers import env_of, get, one, state_is, submit  # noqa: E402
from localhub import wait_for  # noqa: E402

K8S_VERSION = "1.33.0"
NS = "hub"
NOTEBOOK_IMAGE = "quay.io/jupyter/pytorch-notebook:2025-01-06"

SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "kube-gpu-1", "gpus": 4, "gpu_model": "a100", "cpu": 64, "memory": "512Gi"},
    {"name": "kube-gpu-2", "gpus": 4, "gpu_model": "a100", "cpu": 64, "memory": "512Gi"},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 8, "cpu": 128, "memory": "1Ti"}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "groups": ["nlp"]},
]
c.LauncherApp.backend_class = "spawner.launch_kube.KubeLauncher"
c.LauncherApp.poll_interval = 0.3
c.LauncherApp.cancel_grace = 7
c.LauncherApp.preempt_grace = 13
c.KubeLauncher.namespace = "hub"
c.KubeLauncher.kubeconfig = KUBECONFIG
c.KubeLauncher.termination_grace_seconds = 45
c.KubeLauncher.pod_computehub_url = "http://hub:8081/services/computehub"
c.KubeLauncher.network_policy = True        # as the chart sets it (networkPolicy.enabled)
c.KubeLauncher.log_interval = 0.3
"""

# alice's notebook pod, as QueuedKubeSpawner labels it: jobs copy its image, home and security context.
NOTEBOOK_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "jupyter-alice", "namespace": NS,
                 "labels": {"component": "singleuser-server", "computehub/user": "alice"},
                 "annotations": {"computehub/user": "alice", "hub.jupyter.org/username": "alice"}},
    "spec": {"securityContext": {"fsGroup": 100},
             "containers": [{"name": "notebook", "image": NOTEBOOK_IMAGE,
                             "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False},
                             "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"},
                                              {"name": "secret", "mountPath": "/etc/hub-secret"}]}],
             "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}},
                         {"name": "secret", "secret": {"secretName": "hub-internal"}}]},
}


@pytest.fixture(scope="module")
def kc(tmp_path_factory):
    def notebook_pod(cluster):
        cluster.run(create(cluster, f"/api/v1/namespaces/{NS}/pods", NOTEBOOK_POD))
    with launcher_hub(tmp_path_factory.mktemp("kube-launch"), SERVICE, setup=notebook_pod) as hub:
        yield hub


@pytest.fixture(autouse=True)
def nothing_left_running(kc):
    """A test that fails midway leaves its work holding GPUs; cancel it (as the admin), so
    that the next test starts from free nodes and fails, if at all, for its own reason."""
    yield
    r = kc.call("GET", "/workloads?state=pending&state=admitted&state=running&limit=1000", kc.tokens["ada"])
    assert r.status_code == 200, r.text
    for w in r.json()["workloads"]:
        kc.call("DELETE", f"/workloads/{w['id']}", kc.tokens["ada"])


def test_training_job_runs_like_the_notebook_and_finishes(kc):
    w = submit(kc, "alice", {"command": ["python", "train.py", "--epochs", "3"], "workdir": "/home/jovyan/proj",
                             "env": {"WANDB_MODE": "offline", "RANK": "5"}}, gpus=2)
    wid = w["id"]
    running = wait_for("running", lambda: state_is(kc, wid, "running"))
    job = wait_for("the Job", lambda: one(kc, "jobs", wid))
    node = running["placement"][0]["node"]
    assert running["metadata"]["status"]["node"] == node
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert job["metadata"]["name"] == f"ch-{wid}" and job["spec"]["completions"] == 1
    assert spec["nodeName"] == node and c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert c["image"] == NOTEBOOK_IMAGE and c["command"] == ["python", "train.py", "--epochs", "3"]
    assert c["workingDir"] == "/home/jovyan/proj"
    assert spec["volumes"] == [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}}]
    assert c["volumeMounts"] == [{"name": "home", "mountPath": "/home/jovyan"}]     # not the hub's secret
    assert spec["securityContext"] == {"fsGroup": 100}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["securityContext"]["runAsUser"] == 1000
    assert spec["priorityClassName"] == "computehub-training" and spec["terminationGracePeriodSeconds"] == 45
    assert spec["automountServiceAccountToken"] is False
    assert job["metadata"]["labels"]["computehub/user"] == "alice"
    env = env_of(c)
    assert env["WANDB_MODE"] == "offline" and env["COMPUTEHUB_WORKLOAD_ID"] == wid
    assert env["COMPUTEHUB_CHECKPOINT_DIR"] == f"/home/jovyan/.computehub/checkpoints/{wid}"
    assert env["WORLD_SIZE"] == "1" and isinstance(env["RANK"], dict)        # the user's RANK is not theirs to set
    assert env["COMPUTEHUB_URL"] == "http://hub:8081/services/computehub"
    # No hub token in the pod, but its own report token, from a Secret of its own (not in the
    # pod spec): the job reports its saves itself.
    assert not {"JUPYTERHUB_API_TOKEN", "COMPUTEHUB_TOKEN"} & set(env)
    secret = one(kc, "secrets", wid)
    assert env["COMPUTEHUB_REPORT_TOKEN"] == {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "token"}}
    token = (secret.get("stringData") or {}).get("token") or base64.b64decode(secret["data"]["token"]).decode()
    assert token not in json.dumps(job)
    r = kc.call("POST", f"/workloads/{wid}/checkpoint", token)
    assert r.status_code == 200 and r.json()["checkpointed_at"] is not None, r.text
    # What the pod writes reaches the workload's log while it runs (the kubelet's part played here).
    pod = wait_for("its pod", lambda: one(kc, "pods", wid))["metadata"]["name"]
    kc.cluster.run(kc.cluster.patch_pod_status(NS, pod, {"phase": "Running"}))
    kc.cluster.write_pod_log(NS, pod, ["epoch 1 loss 0.93"])
    logs = wait_for("the pod's line in its log", lambda: [
        line for line in kc.call("GET", f"/workloads/{wid}/logs", kc.tokens["alice"]).json().get("lines", [])
        if line == "epoch 1 loss 0.93"])
    assert logs == ["epoch 1 loss 0.93"]

    kc.cluster.run(patch_status(kc.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{wid}/status",
                                {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}))
    done = wait_for("finished", lambda: state_is(kc, wid, "finished", "failed"))
    assert done["state"] == "finished" and done["exit_code"] == 0, done
    # Once the service has heard the end, nothing is left behind: not the Job, not the Secret.
    wait_for("the Job and its Secret deleted", lambda: not [
        o for plural in ("jobs", "secrets") for o in kc.cluster.objects(plural, NS)
        if o["metadata"]["labels"].get("computehub/workload") == wid])


def test_an_arrays_tasks_are_jobs_of_their_own_two_at_a_time_each_told_its_index(kc):
    w = submit(kc, "alice", {"command": "python sweep.py --seed $COMPUTEHUB_ARRAY_TASK_ID",
                             "env": {"COMPUTEHUB_ARRAY_TASK_ID": "99"}}, gpus=1, array="4-6%2")
    first, tasks = w["id"], w["tasks"]
    assert len(tasks) == 3 and tasks[0] == first
    for wid in tasks[:2]:
        wait_for("running", lambda: state_is(kc, wid, "running"))
    jobs = {wid: wait_for("the Job", lambda: one(kc, "jobs", wid)) for wid in tasks[:2]}
    envs = [env_of(j["spec"]["template"]["spec"]["containers"][0]) for j in jobs.values()]
    assert [(e["COMPUTEHUB_ARRAY_ID"], e["COMPUTEHUB_ARRAY_TASK_ID"], e["COMPUTEHUB_ARRAY_TASK_COUNT"])
            for e in envs] == [(first, "4", "3"), (first, "5", "3")]         # the user's "99" dropped
    third = get(kc, tasks[2])
    assert third["state"] == "pending" and one(kc, "jobs", tasks[2]) is None
    assert third["explanation"]["reason"].startswith(f"array {first} runs at most 2 tasks at a time and 2 are")
    kc.cluster.run(patch_status(kc.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{first}/status",
                                {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}))
    wait_for("the third task running", lambda: state_is(kc, tasks[2], "running"))
    job = wait_for("its Job", lambda: one(kc, "jobs", tasks[2]))
    assert env_of(job["spec"]["template"]["spec"]["containers"][0])["COMPUTEHUB_ARRAY_TASK_ID"] == "6"


def test_two_worker_job_is_indexed_with_a_headless_service_and_can_fail(kc):
    w = submit(kc, "bob", {"command": ["torchrun", "--nnodes=2", "{script}"], "script": "print('rank')\n"},
               gpus=4, workers=2)
    wid = w["id"]
    running = wait_for("running", lambda: state_is(kc, wid, "running"))
    job = wait_for("the Job", lambda: one(kc, "jobs", wid))
    svc = one(kc, "services", wid)
    name = f"ch-{wid}"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    spec = job["spec"]["template"]["spec"]
    assert spec["subdomain"] == name and svc["spec"]["clusterIP"] == "None"
    nodes = sorted({a["node"] for a in running["placement"]})
    assert nodes == ["kube-gpu-1", "kube-gpu-2"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]
    c = spec["containers"][0]
    env = env_of(c)
    assert env["MASTER_ADDR"] == f"{name}-0.{name}.{NS}.svc" and env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "2"
    assert env["RANK"] == {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert c["image"] == "quay.io/jupyter/base-notebook:latest"        # bob has no notebook pod: the default
    assert c["command"] == ["torchrun", "--nnodes=2", "/computehub/script/script.py"]
    cm = one(kc, "configmaps", wid)
    assert cm["data"] == {"script.py": "print('rank')\n"}
    # The launcher reports "running" once the Job exists; the job controller (played by this
    # test, every 0.1 s) creates its pods a moment later, as the real one does.
    wait_for("the Job's two pods", lambda: len([p for p in kc.cluster.objects("pods", NS)
                                                if p["metadata"]["labels"].get("computehub/workload") == wid]) == 2,
             timeout=30)

    kc.cluster.run(patch_status(kc.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/{name}/status",
                                {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                              "reason": "BackoffLimitExceeded",
                                                              "message": "Job has reached the specified backoff limit"}]}))
    done = wait_for("failed", lambda: state_is(kc, wid, "finished", "failed"))
    assert done["state"] == "failed" and "BackoffLimitExceeded" in done["reason"], done


def set_finalizers(kc, pod: dict, finalizers: list[str]) -> None:
    """Hold a pod after its deletion (as a kubelet stopping its containers would), or let it go."""
    async def patch():
        async with kc.cluster.emulator.patch(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}",
                                             json={"metadata": {"finalizers": finalizers}},
                                             headers={"Content-Type": "application/merge-patch+json"}) as r:
            r.raise_for_status()
    kc.cluster.run(patch())


def test_cancel_deletes_pods_with_grace_and_holds_the_gpu_until_they_are_gone(kc):
    """A cancelled job is `cancelling` until its pod is gone, not just deleted: a terminating pod
    keeps its GPU (the emulated API keeps the deleted pod, marked, while a finalizer holds it,
    as a real API server keeps it until its kubelet has stopped the containers), and a job
    waiting for that GPU is admitted only once the pod is gone."""
    w = submit(kc, "alice", {"command": ["sleep", "infinity"]}, gpus=4)
    wid = w["id"]
    wait_for("running", lambda: state_is(kc, wid, "running"))
    pod = wait_for("its pod", lambda: one(kc, "pods", wid))
    other = submit(kc, "bob", {"command": ["sleep", "infinity"]}, gpus=4)      # fills the other node
    wait_for("the other job running", lambda: state_is(kc, other["id"], "running"))
    assert one(kc, "secrets", wid) is not None
    set_finalizers(kc, pod, ["test.computehub/kubelet-stopping"])
    r = kc.call("DELETE", f"/workloads/{wid}", kc.tokens["alice"])
    assert r.status_code == 200 and r.json()["state"] == "cancelling", r.text
    waiting = submit(kc, "alice", {"command": ["sleep", "infinity"]}, gpus=4)
    wait_for("the pod marked for deletion",
             lambda: (p := one(kc, "pods", wid)) and p["metadata"].get("deletionTimestamp"))
    time.sleep(3)                     # the launcher looks every second: it waits for the pod
    assert state_is(kc, wid, "cancelling") and one(kc, "pods", wid) is not None
    assert state_is(kc, waiting["id"], "pending"), get(kc, waiting["id"])
    set_finalizers(kc, pod, [])          # its containers have stopped: the pod goes
    wait_for("the pod gone", lambda: one(kc, "pods", wid) is None and one(kc, "jobs", wid) is None)
    done = wait_for("cancelled", lambda: state_is(kc, wid, "cancelled"))
    assert done["reason"] == "cancelled by alice; stopped", done
    wait_for("its report token's Secret deleted too", lambda: one(kc, "secrets", wid) is None, timeout=10)
    deletes = pod_deletes(kc.cluster, f"ch-{wid}")
    assert deletes and all(rq.params.get("gracePeriodSeconds") == "7" for rq in deletes), \
        [rq.params for rq in deletes]
    started = wait_for("the waiting job admitted", lambda: state_is(kc, waiting["id"], "admitted", "running"))
    assert started["admitted_at"] >= done["ended_at"], (started, done)


def test_preemption_is_sigterm_with_the_grace_then_a_rerun(kc):
    """A 2 × 4-GPU batch job fills both nodes; a training job preempts it: the launcher deletes
    the batch pods with preempt_grace (SIGTERM → SIGKILL), reports it stopped, and runs it again
    (a new Job) once the training job completes."""
    victim = submit(kc, "bob", {"command": ["python", "sweep.py"]}, kind="batch", gpus=4, workers=2)
    vid = victim["id"]
    wait_for("the batch job to run", lambda: state_is(kc, vid, "running"))
    first = wait_for("its Job", lambda: one(kc, "jobs", vid))
    wait_for("its pods", lambda: len([p for p in kc.cluster.objects("pods", NS)
                                       if p["metadata"]["labels"].get("computehub/workload") == vid]) == 2)
    urgent = submit(kc, "alice", {"command": ["python", "urgent.py"]}, gpus=4)
    uid = urgent["id"]
    wait_for("the urgent job to run", lambda: state_is(kc, uid, "running"), 90)
    deletes = pod_deletes(kc.cluster, f"ch-{vid}")
    assert len(deletes) >= 2 and all(rq.params.get("gracePeriodSeconds") == "13" for rq in deletes), \
        [rq.params for rq in deletes]
    assert get(kc, vid)["preemptions"] >= 1
    kc.cluster.run(patch_status(kc.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{uid}/status",
                                {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}))
    wait_for("the urgent job to finish", lambda: state_is(kc, uid, "finished"), 60)
    wait_for("the batch job to run again", lambda: state_is(kc, vid, "running"), 90)
    again = wait_for("a new Job", lambda: (one(kc, "jobs", vid) or {}).get("metadata", {}).get("uid")
                     not in (None, first["metadata"]["uid"]) and one(kc, "jobs", vid))
    assert again["spec"]["completions"] == 2
    r = kc.call("DELETE", f"/workloads/{vid}", kc.tokens["bob"])
    assert r.status_code == 200, r.text
    wait_for("the batch Job deleted", lambda: one(kc, "jobs", vid) is None)


def test_inference_is_a_deployment_and_service_ready_when_its_probe_passes(kc):
    w = submit(kc, "alice", {"command": "python -m http.server $PORT", "port": 8000}, kind="inference")
    wid = w["id"]
    wait_for("running", lambda: state_is(kc, wid, "running"))
    dep = wait_for("the Deployment", lambda: one(kc, "deployments", wid))
    svc = one(kc, "services", wid)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["/bin/sh", "-c", "python -m http.server $PORT"] and env_of(c)["PORT"] == "8000"
    assert c["readinessProbe"]["tcpSocket"]["port"] == 8000
    assert dep["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    assert dep["spec"]["template"]["spec"]["priorityClassName"] == "computehub-inference"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8000}]
    assert not get(kc, wid)["metadata"]["status"].get("ready")
    kc.cluster.run(patch_status(kc.cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/ch-{wid}/status",
                                {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}))
    ready = wait_for("ready", lambda: get(kc, wid)["metadata"]["status"].get("ready") and get(kc, wid))
    assert ready["metadata"]["status"]["endpoint"] == f"http://ch-{wid}.{NS}.svc:80"
    r = kc.call("DELETE", f"/workloads/{wid}", kc.tokens["alice"])
    assert r.status_code == 200, r.text
    wait_for("the Deployment and Service deleted", lambda: one(kc, "deployments", wid) is None
             and one(kc, "services", wid) is None)


def test_an_inference_deployment_deleted_by_hand_fails_it_and_is_not_made_again(kc):
    """Deployments are read in one listing per look; one missing from it is read to be sure."""
    wid = submit(kc, "alice", {"command": "python -m http.server $PORT"}, kind="inference")["id"]
    wait_for("running", lambda: state_is(kc, wid, "running"))
    wait_for("the Deployment", lambda: one(kc, "deployments", wid))

    async def kubectl_delete():
        async with kc.cluster.emulator.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/ch-{wid}") as r:
            r.raise_for_status()
    kc.cluster.run(kubectl_delete())
    w = wait_for("failed", lambda: state_is(kc, wid, "failed"), 30)
    assert w["reason"].startswith(f"its Deployment ch-{wid} was deleted outside ComputeHub"), w
    assert one(kc, "deployments", wid) is None and not w["metadata"]["status"].get("restarts"), w


def test_a_lost_node_requeues_the_job_by_its_class(kc):
    """The Job's podFailurePolicy fails it when a pod gets DisruptionTarget (the node went
    away); the launcher reports node_lost and the service requeues the training job. The
    emulated API has no Job controller: the test writes the status that controller writes."""
    w = submit(kc, "alice", {"command": ["python", "train.py"]}, gpus=1)
    wid = w["id"]
    wait_for("running", lambda: state_is(kc, wid, "running"))
    job = wait_for("the Job", lambda: one(kc, "jobs", wid))
    assert job["spec"]["podFailurePolicy"] == {"rules": [{"action": "FailJob", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}]}]}
    kc.cluster.run(patch_status(kc.cluster, f"/apis/batch/v1/namespaces/{NS}/jobs/ch-{wid}/status", {
        "failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                                     "message": f"Pod {NS}/ch-{wid}-0-abcde has condition DisruptionTarget "
                                                "matching FailJob rule at index 0"}]}))
    # requeued (training requeues), then admitted and started again as a fresh Job
    events = wait_for("the node_lost event", lambda: [
        e for e in kc.call("GET", f"/audit?workload={wid}", kc.tokens["ada"]).json().get("events", [])
        if e["kind"] in ("node_lost", "requeued")], timeout=60)
    assert {e["kind"] for e in events} >= {"node_lost", "requeued"}, events
    assert "DisruptionTarget" in next(e for e in events if e["kind"] == "node_lost")["reason"]
    again = wait_for("running again", lambda: state_is(kc, wid, "running"))
    assert again["id"] == wid
    # ... as a fresh Job: the failed one was deleted once its end was reported, so the new run
    # is not taken for lost again (before, it met the failed Job's name and was requeued for ever).
    fresh = wait_for("the new Job", lambda: one(kc, "jobs", wid))
    assert not (fresh.get("status") or {}).get("conditions"), fresh
    time.sleep(2.0)         # several of the launcher's looks at it
    kinds = [e["kind"] for e in kc.call("GET", f"/audit?workload={wid}", kc.tokens["ada"]).json()["events"]]
    assert kinds.count("node_lost") == 1 and state_is(kc, wid, "running"), kinds
    assert kc.call("DELETE", f"/workloads/{wid}", kc.tokens["alice"]).status_code == 200


def test_an_earlier_runs_job_left_behind_is_replaced_not_read_as_this_run(kc):
    """A Job an earlier run left (its removal failed: the API was down when it ended) has the
    workload's name: this run's start meets it (409). It is replaced, not read as this run
    ended (which, for a Job failed by a lost node, requeued the workload again and again)."""
    blocker = submit(kc, "alice", {"command": ["sleep", "infinity"]}, gpus=4, workers=2)
    wait_for("the blocker running", lambda: state_is(kc, blocker["id"], "running"))
    wid = submit(kc, "alice", {"command": ["python", "train.py"]}, gpus=1)["id"]
    assert state_is(kc, wid, "pending")
    jobs = f"/apis/batch/v1/namespaces/{NS}/jobs"
    kc.cluster.run(create(kc.cluster, jobs, bare_job(f"ch-{wid}", wid, {"computehub/run": "1.000000"})))
    kc.cluster.run(patch_status(kc.cluster, f"{jobs}/ch-{wid}/status", {"failed": 1, "conditions": [
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "... DisruptionTarget ..."}]}))
    assert kc.call("DELETE", f"/workloads/{blocker['id']}", kc.tokens["alice"]).status_code == 200
    w = wait_for("running", lambda: state_is(kc, wid, "running"))
    fresh = wait_for("this run's Job", lambda: (j := one(kc, "jobs", wid))
                     and j["metadata"]["annotations"]["computehub/run"] == f"{w['admitted_at']:.6f}" and j)
    assert not (fresh.get("status") or {}).get("conditions"), fresh
    time.sleep(2.0)         # several of the launcher's looks at it
    kinds = [e["kind"] for e in kc.call("GET", f"/audit?workload={wid}", kc.tokens["ada"]).json()["events"]]
    assert "node_lost" not in kinds and state_is(kc, wid, "running"), kinds
    lines = kc.call("GET", f"/workloads/{wid}/logs", kc.tokens["alice"]).json()["lines"]
    assert any(f"an earlier run's Job ch-{wid} was still there: replaced" in x for x in lines), lines
    assert kc.call("DELETE", f"/workloads/{wid}", kc.tokens["alice"]).status_code == 200


def test_an_earlier_runs_report_secret_is_replaced_with_this_runs_token(kc):
    """The report token's Secret an earlier run left (its Job went, its Secret did not) gets
    this run's token: the earlier run's is void (a token lives as long as its run)."""
    blocker = submit(kc, "alice", {"command": ["sleep", "infinity"]}, gpus=4, workers=2)
    wait_for("the blocker running", lambda: state_is(kc, blocker["id"], "running"))
    wid = submit(kc, "alice", {"command": ["python", "train.py"]}, gpus=1)["id"]
    stale = {"apiVersion": "v1", "kind": "Secret", "stringData": {"token": "chrt_" + "1" * 64}, "metadata": {
        "name": f"ch-{wid}-report", "labels": {"computehub/workload": wid}, "annotations": {"computehub/run": "1.0"}}}
    kc.cluster.run(create(kc.cluster, f"/api/v1/namespaces/{NS}/secrets", stale))
    assert kc.call("DELETE", f"/workloads/{blocker['id']}", kc.tokens["alice"]).status_code == 200
    w = wait_for("running", lambda: state_is(kc, wid, "running"))
    token = kc.call("GET", f"/workloads/{wid}", kc.tokens["alice"]).json()["report_token"]
    secret = wait_for("this run's Secret",
                      lambda: (o := one(kc, "secrets", wid)) and o["stringData"]["token"] == token and o)
    assert secret["metadata"]["annotations"]["computehub/run"] == f"{w['admitted_at']:.6f}"
    r = kc.call("POST", f"/workloads/{wid}/checkpoint", stale["stringData"]["token"])
    assert r.status_code == 403 and "earlier run" in r.json()["message"], r.text
    assert kc.call("POST", f"/workloads/{wid}/checkpoint", token).status_code == 200


def test_every_manifest_validates(kc):
    assert K8S_VERSION in all_versions(), f"kubernetes-validate bundles no schema for {K8S_VERSION}"
    created = [m for m in kc.cluster.created() if (m.get("metadata") or {}).get("name", "").startswith("ch-")
               and m["kind"] != "Pod"]          # pods here are the test's job controller's
    assert {m["kind"] for m in created} >= {"Job", "Service", "ConfigMap", "Deployment"}
    for m in created:
        validate(m, K8S_VERSION, strict=True)
    kc.cluster.check()


def test_the_charts_launcher_role_allows_every_request_the_launcher_made(kc, tmp_path):
    """Every request the launcher made in this module's scenarios, read as RBAC reads it, is
    allowed by the Role helm/computehub gives the launcher, and the Role grants nothing unused."""
    from chart import one, render
    from rbac import allows, needed
    made = needed(kc.cluster.requests())
    assert {(g, r, v) for g, r, v, _ in made} >= {("batch", "jobs", "create"), ("", "pods", "list"),
                                                    ("", "secrets", "patch"), ("apps", "deployments", "delete")}
    assert {ns for *_, ns in made} == {NS}
    rules = one(render(tmp_path, f"launcher.namespace={NS}"), "Role")["rules"]
    refused = sorted((g, r, v) for g, r, v, _ in made if not allows(rules, g, r, v))
    assert not refused, f"the chart's launcher Role refuses {refused}"
    unused = sorted((g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
                    for v in rule["verbs"] if (g, r, v) not in {(a, b, c) for a, b, c, _ in made})
    assert not unused, f"the chart's launcher Role grants what the launcher never needed: {unused}"
