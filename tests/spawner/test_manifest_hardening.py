"""What a user's job description can and cannot put into a job's pods (spawner/kube_manifests.py).

Pure functions: the manifests are built from a workload as the REST API returns it; nothing
is emulated. The NVIDIA container runtime reads ``NVIDIA_VISIBLE_DEVICES`` (and the other
``NVIDIA_*`` variables) from the container's environment, where a pod's own ``env`` wins over
the device plugin's value: ``NVIDIA_VISIBLE_DEVICES=all`` in a job's env gave the pod every
GPU of its node. And a pod that asks for no GPU, in a CUDA image (which sets
``NVIDIA_VISIBLE_DEVICES=all``), saw them all on a node whose default runtime is NVIDIA's.
"""

from __future__ import annotations

import pytest

from scheduler import ValidationError
from scheduler.job_env import check_job_env
from spawner.kube_manifests import Settings, Template, inference_manifests, training_manifests
from spawner.launch_base import job_of

HOSTILE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all",
               "nvidia_visible_devices": "all", "NVIDIA_MIG_CONFIG_DEVICES": "all",
               "CUDA_VISIBLE_DEVICES": "0,1,2,3", "CUDA_DEVICE_ORDER": "FASTEST_FIRST", "WANDB_MODE": "offline"}


def workload(gpus: int, kind: str = "training", env=None) -> dict:
    return {"id": "w0000042", "user": "alice", "queue": "vision", "kind": kind, "workers": 1,
            "resources": {"gpu": gpus, "cpu": "1000m", "memory": 1 << 30} if gpus else {"cpu": "1000m"},
            "placement": [{"node": "gpu-1", "gpus": list(range(gpus))}], "admitted_at": 1.0,
            "metadata": {"job": {"command": ["python", "train.py"], "env": env or {}, "port": 8080}}}


def containers(manifests: list[dict]) -> list[dict]:
    return [c for m in manifests if m["kind"] in ("Job", "Deployment")
            for c in m["spec"]["template"]["spec"]["containers"]]


def env_of(c: dict) -> dict:
    names = [e["name"] for e in c["env"]]
    assert len(names) == len(set(names)), f"a name twice (the later would win): {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def build(w: dict) -> list[dict]:
    t = Template(image="quay.io/jupyter/pytorch-notebook:cuda12-latest", home="/home/jovyan")
    make = inference_manifests if w["kind"] == "inference" else training_manifests
    return make(w, job_of(w), t, Settings(namespace="jobs"))


@pytest.mark.parametrize("kind", ["training", "inference"])
def test_a_users_nvidia_variables_never_reach_a_gpu_pod(kind):
    w = workload(1, kind, HOSTILE_ENV)
    (c,) = containers(build(w))
    env = env_of(c)
    assert not [k for k in env if k.upper().startswith("NVIDIA_")], env     # the device plugin's decides
    assert "CUDA_VISIBLE_DEVICES" not in env and "CUDA_DEVICE_ORDER" not in env
    assert env["WANDB_MODE"] == "offline"                                   # the user's own names stay
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"


@pytest.mark.parametrize("kind", ["training", "inference"])
def test_a_pod_without_gpus_gets_no_device_from_the_runtime(kind):
    w = workload(0, kind, HOSTILE_ENV)
    (c,) = containers(build(w))
    env = env_of(c)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"          # not the image's "all", not the user's
    assert "NVIDIA_DRIVER_CAPABILITIES" not in env and "nvidia_visible_devices" not in env
    assert "nvidia.com/gpu" not in (c["resources"].get("limits") or {})


def test_job_of_drops_runtime_names_whatever_the_workload_carries():
    job = job_of(workload(2, env=HOSTILE_ENV))
    assert job.env == {"WANDB_MODE": "offline"}


@pytest.mark.parametrize("env", [{"NVIDIA_VISIBLE_DEVICES": "all"}, {"Nvidia_Driver_Capabilities": "compute"},
                                 {"A": "1", "NVIDIA_REQUIRE_CUDA": "cuda>=12"}])
def test_the_service_check_refuses_runtime_names_with_a_message(env):
    with pytest.raises(ValidationError) as e:
        check_job_env({"job": {"command": ["x"], "env": env}})
    assert e.value.status == 400 and "NVIDIA_* are read by the container runtime" in e.value.message
    assert next(iter(k for k in env if k.upper().startswith("NVIDIA_"))) in e.value.message


@pytest.mark.parametrize("metadata", [None, {}, {"job": "x"}, {"job": {"env": None}}, {"job": {"env": ["NVIDIA_X"]}},
                                      {"job": {"env": {"PATH": "/bin", "RANK": "3", "CUDA_VISIBLE_DEVICES": "0"}}}])
def test_the_service_check_leaves_other_shapes_and_names_alone(metadata):
    check_job_env(metadata)      # launcher-set names are dropped there, as documented; shapes it judges


@pytest.mark.parametrize("kind", ["training", "inference"])
def test_a_job_may_do_what_an_admin_let_its_notebook_do_and_no_more(kind):
    """A notebook profile that adds SYS_PTRACE (for py-spy; the admin waived "capabilities" for
    notebooks): its jobs copy the notebook's security context and are not refused for it; they
    still never run privileged or escalate, whatever the notebook had."""
    t = Template(image="quay.io/jupyter/pytorch-notebook:cuda12-latest", home="/home/jovyan",
                 pod_security_context={"seccompProfile": {"type": "RuntimeDefault"}},
                 security_context={"capabilities": {"add": ["SYS_PTRACE"]}, "privileged": True,
                                   "allowPrivilegeEscalation": True, "runAsUser": 1000})
    assert t.allowed_checks() == {"capabilities", "privileged"}
    assert Template(image="x", home="/home/jovyan").allowed_checks() == set()
    w = workload(1, kind)
    make = inference_manifests if kind == "inference" else training_manifests
    (c,) = containers(make(w, job_of(w), t, Settings(namespace="jobs")))
    assert c["securityContext"] == {"capabilities": {"add": ["SYS_PTRACE"]}, "privileged": False,
                                    "allowPrivilegeEscalation": False, "runAsUser": 1000}


def restricted(t: Template, kind: str = "training") -> list[dict]:
    w = workload(1, kind)
    make = inference_manifests if kind == "inference" else training_manifests
    return make(w, job_of(w), t, Settings(namespace="jobs", pod_security="restricted"))


@pytest.mark.parametrize("kind", ["training", "inference"])
def test_restricted_job_pods_meet_the_restricted_level(kind):
    """pod_security = "restricted": what a namespace enforcing the restricted level admits, filled
    in where the notebook (here the kubespawner default's) leaves it unsaid."""
    from spawner.pod_guard import restricted_violations
    t = Template(image="quay.io/jupyter/base-notebook:latest", home="/home/jovyan",
                 security_context={"runAsUser": 1000, "allowPrivilegeEscalation": False})
    assert restricted_violations({"spec": {"containers": [{"name": "notebook",
                                                           "securityContext": dict(t.security_context)}]}})
    (m,) = [m for m in restricted(t, kind) if m["kind"] in ("Job", "Deployment")]
    spec = m["spec"]["template"]["spec"]
    assert restricted_violations({"spec": spec}) == []
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True}
    assert spec["containers"][0]["securityContext"] == {
        "runAsUser": 1000, "allowPrivilegeEscalation": False, "privileged": False,
        "capabilities": {"drop": ["ALL"]}}
    assert t.pod_security_context == {} and "capabilities" not in t.security_context     # the template untouched
    # The default level leaves the notebook's context as it is.
    (c,) = containers(build(workload(1, kind)))
    assert "capabilities" not in c["securityContext"]


@pytest.mark.parametrize("context, message", [
    ({"runAsUser": 0}, "container 'worker' may run as root"),
    ({"runAsUser": 1000, "capabilities": {"add": ["SYS_PTRACE"]}},
     "container 'worker' adds the capabilities SYS_PTRACE"),
    ({"runAsUser": 1000, "seccompProfile": {"type": "Unconfined"}}, "would run without a seccomp profile"),
])
def test_restricted_refuses_a_job_whose_notebook_it_cannot_copy(context, message):
    from spawner.options import PodPolicyError
    t = Template(image="x", home="/home/jovyan", security_context=context)
    with pytest.raises(PodPolicyError) as e:
        restricted(t)
    assert message in str(e.value) and "restricted level" in str(e.value)


def test_restricted_volumes():
    from spawner.pod_guard import restricted_violations
    pod = {"spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "h"}},
                                {"name": "data", "nfs": {"server": "nas", "path": "/data"}}],
                    "containers": [{"name": "c", "securityContext": {
                        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    assert restricted_violations(pod) == ["volume 'data' is of type nfs"]
