"""Kubernetes manifests for admitted training, batch and inference workloads (pure functions).

``spawner/launch_kube.py`` creates them. A job runs like its owner's notebook:
the same image, home volume, security context and tolerations, taken from the
user's notebook pod (label ``computehub/user``, and only if its annotations name
exactly that user), else configured defaults.
Nothing a user passes (command, env, working directory, script, port) can widen
what the pod may do: privilege escalation and privileged mode are forced off,
the service-account token is not mounted, and ``options.check_pod`` guards the
result.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from scheduler import arrays
from scheduler.model import run_label

from .kube import LABEL_PREFIX, USER_ANNOTATION, label_value
from .launch_base import CHECKPOINT_ENV, REPORT_TOKEN_ENV, Job, gpus_of
from .options import PodPolicyError, check_pod, toleration_key
from .pod_guard import baseline_findings, harden_for_restricted, restricted_violations

SCRIPT_DIR = "/computehub/script"
JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SUFFIXES = {"ConfigMap": "-script", "Secret": "-report"}     # names of a workload's other objects
RUN_ANNOTATION = "computehub/run"     # which run of the workload made an object (its admission time)
# Annotations that carry the hub's user name as is: QueuedKubeSpawner's, KubeSpawner's own.
OWNER_ANNOTATIONS = (USER_ANNOTATION, "hub.jupyter.org/username")


@dataclass
class Settings:
    namespace: str = "default"
    gpu_resource: str = "nvidia.com/gpu"
    priority_class: str = ""              # the PriorityClass for this workload's class ('' = none)
    grace_seconds: int = 30               # terminationGracePeriodSeconds: SIGTERM → SIGKILL on preemption
    master_port: int = 29500
    inference_port: int = 8080
    computehub_url: str = ""
    checkpoint_dir_template: str = "{home}/.computehub/checkpoints/{id}"
    default_image: str = "quay.io/jupyter/base-notebook:latest"
    default_home: str = "/home/jovyan"
    default_security_context: dict = field(default_factory=lambda: {"runAsUser": 1000, "runAsGroup": 100,
                                                                    "runAsNonRoot": True})
    network_policy: bool = False          # a NetworkPolicy letting the workload's own pods talk to each other
    pod_security: str = "baseline"        # the Pod Security Standards level job pods meet: baseline | restricted


@dataclass
class Template:
    """What a job copies from its owner's notebook pod."""

    image: str
    home: str
    pod_security_context: dict = field(default_factory=dict)
    security_context: dict = field(default_factory=dict)
    volumes: list = field(default_factory=list)
    mounts: list = field(default_factory=list)
    tolerations: list = field(default_factory=list)
    image_pull_secrets: list = field(default_factory=list)
    from_pod: str = ""

    def allowed_checks(self) -> set[str]:
        """The pod guard's checks that the notebook's own security contexts fail: an admin let the
        notebook pod through them (``pod_policy_waive``), so its jobs, which copy them, may too.
        (Privileged and privilege escalation are switched off in jobs whatever the notebook has.)"""
        copied = {"spec": {"securityContext": self.pod_security_context,
                           "containers": [{"name": "notebook", "securityContext": self.security_context}]}}
        return {name for name, _ in baseline_findings(copied)}


def owned_by(pod: dict, user: str) -> bool:
    """Whether a notebook pod (API JSON) is ``user``'s: every owner annotation it has names exactly
    ``user``, and it has one. A label selector alone cannot tell (a value is escaped, and any pod
    may claim a label); a pod that fails this must never become the template of ``user``'s jobs."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    names = [ann[k] for k in OWNER_ANNOTATIONS if k in ann]
    return bool(names) and all(n == user for n in names)


def template_from(pod: dict | None, s: Settings) -> Template:
    """The image, home volume (persistent volume claims only), security contexts and tolerations
    of a notebook pod (API JSON), or the configured defaults when the user has none running."""
    if not pod:
        return Template(image=s.default_image, home=s.default_home,
                        security_context=dict(s.default_security_context))
    spec = pod.get("spec") or {}
    c = next((c for c in spec.get("containers") or [] if c.get("name") == "notebook"),
             (spec.get("containers") or [{}])[0])
    pvcs = {v["name"]: v for v in spec.get("volumes") or [] if v.get("persistentVolumeClaim")}
    mounts = [{k: m[k] for k in ("name", "mountPath", "subPath") if k in m}
              for m in c.get("volumeMounts") or [] if m.get("name") in pvcs]
    home = next((m["mountPath"] for m in mounts if "home" in m["name"] or m["mountPath"].startswith("/home")),
                mounts[0]["mountPath"] if mounts else s.default_home)
    return Template(image=c.get("image") or s.default_image, home=home,
                    pod_security_context=dict(spec.get("securityContext") or {}),
                    security_context=dict(c.get("securityContext") or s.default_security_context),
                    volumes=[pvcs[n] for n in sorted({m["name"] for m in mounts})], mounts=mounts,
                    tolerations=list(spec.get("tolerations") or []),
                    image_pull_secrets=list(spec.get("imagePullSecrets") or []),
                    from_pod=(pod.get("metadata") or {}).get("name", ""))


def name_of(workload: dict) -> str:
    return "ch-" + label_value(workload["id"]).lower()


# On every object and pod the launcher makes, on nothing else: the chart's NetworkPolicy for job
# pods (helm/computehub/templates/networkpolicy-jobs.yaml) selects them by it.
MANAGED_BY = {"app.kubernetes.io/managed-by": "computehub-launcher"}


def labels_of(workload: dict) -> dict:
    return {LABEL_PREFIX + "workload": label_value(workload["id"]), LABEL_PREFIX + "user": label_value(workload["user"]),
            LABEL_PREFIX + "queue": label_value(workload.get("queue") or ""),
            LABEL_PREFIX + "kind": workload.get("kind") or "batch", **MANAGED_BY}


def run_of(workload: dict) -> str:
    """The run a workload is on (``scheduler.model.run_label``)."""
    return run_label(workload.get("admitted_at"))


def _meta(name: str, s: Settings, labels: dict, workload: dict) -> dict:
    return {"name": name, "namespace": s.namespace, "labels": {k: v for k, v in labels.items() if v},
            "annotations": {RUN_ANNOTATION: run_of(workload), USER_ANNOTATION: workload["user"]}}


def placement_nodes(workload: dict) -> list[str]:
    return [a["node"] for a in workload.get("placement") or []]


def _gpus(workload: dict) -> int:
    """GPUs per worker: the placement's, else the request's."""
    return len(gpus_of(workload, 0)) or int((workload.get("resources") or {}).get("gpu") or 0)


def _resources(workload: dict, s: Settings) -> dict:
    r = workload.get("resources") or {}
    gpus = _gpus(workload)
    limits = {}
    if r.get("cpu"):
        cpu = str(r["cpu"])           # the service renders millicores ("4000m")
        limits["cpu"] = cpu if cpu.endswith("m") else f"{int(round(float(cpu) * 1000))}m"
    if r.get("memory"):
        limits["memory"] = str(int(r["memory"]))
    requests = dict(limits)
    if gpus:
        limits[s.gpu_resource] = str(gpus)
    return {"limits": limits, "requests": requests} if limits else {}


def _pod_spec(workload: dict, job: Job, t: Template, s: Settings, env: list, restart: str) -> dict:
    cmd = list(job.command)
    volumes, mounts = list(t.volumes), list(t.mounts)
    if job.script is not None:
        cmd = [a.replace("{script}", f"{SCRIPT_DIR}/script.py") for a in cmd]
        volumes.append({"name": "computehub-script", "configMap": {"name": name_of(workload) + "-script"}})
        mounts.append({"name": "computehub-script", "mountPath": SCRIPT_DIR, "readOnly": True})
    sc = dict(t.security_context)
    sc.update(allowPrivilegeEscalation=False, privileged=False)     # never wider than the notebook
    container = {"name": "worker", "image": t.image, "command": cmd, "env": env,
                 "workingDir": job.workdir or t.home, "resources": _resources(workload, s),
                 "securityContext": sc, "volumeMounts": mounts}
    spec = {"restartPolicy": restart, "containers": [container], "volumes": volumes,
            "terminationGracePeriodSeconds": int(s.grace_seconds), "automountServiceAccountToken": False,
            "enableServiceLinks": False, "securityContext": t.pod_security_context,
            "tolerations": t.tolerations, "imagePullSecrets": t.image_pull_secrets}
    nodes = sorted(set(placement_nodes(workload)))
    if len(nodes) == 1:
        spec["nodeName"] = nodes[0]          # ComputeHub placed it; the kube-scheduler would re-decide
    elif nodes:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}
    if s.priority_class:
        spec["priorityClassName"] = s.priority_class
    spec = {k: v for k, v in spec.items() if v not in ([], {}, None)}
    allowed = {"node_selector": set(), "tolerations": [toleration_key(x) for x in t.tolerations],
               "service_accounts": set()}         # the notebook's tolerations; nothing else
    check_pod({"spec": spec}, allowed, waive=t.allowed_checks())
    if s.pod_security == "restricted":
        harden_for_restricted(spec)
        refused = restricted_violations({"spec": spec})
        if refused:
            raise PodPolicyError(f"refused: {refused[0]}, which the Pod Security Standards' restricted level "
                                 "forbids (the launcher's pod_security; a job copies its notebook's security "
                                 "context)")
    return spec


def _env(workload: dict, job: Job, t: Template, s: Settings) -> list:
    ckpt = s.checkpoint_dir_template.format(home=t.home, id=workload["id"], username=workload["user"])
    env = [{"name": k, "value": v} for k, v in sorted(job.env.items())]
    env += [{"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "COMPUTEHUB_WORKLOAD_ID", "value": workload["id"]},
            {"name": CHECKPOINT_ENV, "value": ckpt}]
    env += [{"name": k, "value": v} for k, v in arrays.env(workload.get("array")).items()]
    if s.computehub_url:
        env.append({"name": "COMPUTEHUB_URL", "value": s.computehub_url})
    if not _gpus(workload):
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all; on a node whose default runtime is NVIDIA's a
        # pod that asked for no GPU would see every one. With GPUs the device plugin sets it (and
        # a pod's own value would override the plugin's: job_of drops a user's NVIDIA_*).
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    if workload.get("report_token"):     # good for this workload's checkpoint reports only
        env.append({"name": REPORT_TOKEN_ENV, "valueFrom": {"secretKeyRef": {
            "name": name_of(workload) + SUFFIXES["Secret"], "key": "token"}}})
    return env


def script_configmap(workload: dict, job: Job, s: Settings) -> dict | None:
    if job.script is None:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(name_of(workload) + SUFFIXES["ConfigMap"], s, labels_of(workload), workload),
            "data": {"script.py": job.script}}


def report_secret(workload: dict, s: Settings) -> dict | None:
    """The job's report token in a Secret of its own (not in the pod spec, which whoever may
    read pods can see)."""
    if not workload.get("report_token"):
        return None
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _meta(name_of(workload) + SUFFIXES["Secret"], s, labels_of(workload), workload),
            "stringData": {"token": workload["report_token"]}}


def network_policy(workload: dict, s: Settings) -> dict | None:
    """The workload's pods may reach each other (rendezvous, NCCL, replicas), and only each other.
    It adds to the chart's policy for every job pod, which denies all other ingress but the
    service's and allows egress to DNS, the service and the internet: NetworkPolicies are unions,
    and "the same workload as me" is a value no single policy for all pods can say."""
    if not s.network_policy:
        return None
    own = {"matchLabels": {LABEL_PREFIX + "workload": label_value(workload["id"]), **MANAGED_BY}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(name_of(workload), s, labels_of(workload), workload),
            "spec": {"podSelector": own, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [{"podSelector": own}]}], "egress": [{"to": [{"podSelector": own}]}]}}


def _extras(workload: dict, job: Job, s: Settings) -> list[dict]:
    """What a job's pods need besides themselves: its %%submit script, its report token, and
    (before the pods, so that workers find each other from the start) its NetworkPolicy."""
    return [m for m in (script_configmap(workload, job, s), report_secret(workload, s),
                        network_policy(workload, s)) if m]


def training_manifests(workload: dict, job: Job, t: Template, s: Settings) -> list[dict]:
    """A Job (Indexed, with a headless Service for the workers to find rank 0, when more than one
    worker), torchrun-style env: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (the completion index)."""
    name, labels = name_of(workload), labels_of(workload)
    n = int(workload.get("workers") or 1)
    env = _env(workload, job, t, s) + [
        {"name": "WORLD_SIZE", "value": str(n)}, {"name": "LOCAL_RANK", "value": "0"},
        {"name": "LOCAL_WORLD_SIZE", "value": "1"}, {"name": "MASTER_PORT", "value": str(s.master_port)},
        {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX_ANNOTATION}']"}}},
        {"name": "MASTER_ADDR", "value": f"{name}-0.{name}.{s.namespace}.svc" if n > 1 else "127.0.0.1"}]
    pod_spec = _pod_spec(workload, job, t, s, env, restart="Never")
    out = _extras(workload, job, s)
    if n > 1:
        pod_spec["subdomain"] = name
        out.append({"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, s, labels, workload),
                    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                             "selector": {LABEL_PREFIX + "workload": labels[LABEL_PREFIX + "workload"]},
                             "ports": [{"name": "master", "port": s.master_port, "targetPort": s.master_port}]}})
    out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name, s, labels, workload),
                "spec": {"completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 0,
                         # A pod disrupted (its node lost, evicted) fails the Job at once with this rule,
                         # which the launcher reads as "node lost": the service requeues it elsewhere
                         # (a retry here would stay pinned to the lost node).
                         "podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [
                             {"type": "DisruptionTarget", "status": "True"}]}]},
                         "template": {"metadata": {"labels": labels}, "spec": pod_spec}}})
    return out


def inference_manifests(workload: dict, job: Job, t: Template, s: Settings) -> list[dict]:
    """A Deployment (one replica per worker) and a Service; ready when the readiness probe passes."""
    name, labels = name_of(workload), labels_of(workload)
    port = job.port or s.inference_port
    cmd = list(job.command)
    if job.shell:                                      # "$PORT" expands in the shell line
        cmd = ["/bin/sh", "-c", cmd[-1]]
    job = Job(command=cmd, workdir=job.workdir, script=job.script, env=job.env, port=port, shell=job.shell)
    env = _env(workload, job, t, s) + [{"name": "PORT", "value": str(port)}]
    pod_spec = _pod_spec(workload, job, t, s, env, restart="Always")
    c = pod_spec["containers"][0]
    c["ports"] = [{"name": "http", "containerPort": port}]
    c["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 5, "failureThreshold": 3}
    selector = {LABEL_PREFIX + "workload": labels[LABEL_PREFIX + "workload"]}
    out = _extras(workload, job, s)
    out.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, s, labels, workload),
                "spec": {"replicas": int(workload.get("workers") or 1), "selector": {"matchLabels": selector},
                         "template": {"metadata": {"labels": labels}, "spec": pod_spec}}})
    out.append({"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, s, labels, workload),
                "spec": {"selector": selector, "ports": [{"name": "http", "port": 80, "targetPort": port}]}})
    return out


def endpoint_of(workload: dict, s: Settings) -> str:
    return f"http://{name_of(workload)}.{s.namespace}.svc:80"


def describe(cmd: list[str]) -> str:
    return shlex.join(cmd)[:200]
