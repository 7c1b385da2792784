"""spawner/options.py: what a user may ask for, and the pod guard (pure functions, nothing emulated)."""

from __future__ import annotations

import pytest

from spawner.options import OptionsError, PodPolicyError, admin_allowed, check_pod, validate_user_options

PROFILES = [
    {"display_name": "CPU only", "default": True},
    {"display_name": "GPU", "slug": "gpu",
     "kubespawner_override": {"node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                               "effect": "NoSchedule"}]},
     "profile_options": {
         "image": {"choices": {"torch": {"kubespawner_override": {"image": "torch"}}, "tf": {}},
                   "unlisted_choice": {"enabled": True, "validation_regex": r"quay\.io/jupyter/[a-z-]+:[0-9-]+"}},
         "size": {"choices": {"s": {}, "m": {"kubespawner_override": {"service_account": "gpu-reader"}}}},
     }},
]


@pytest.mark.parametrize("options", [
    {}, None, {"profile": "cpu-only"}, {"profile": "gpu", "image": "tf", "size": "m"},
    {"profile": "gpu", "image--unlisted-choice": "quay.io/jupyter/scipy-notebook:2025-01-06"},
    {"profile": "gpu", "queue": "vision"}, {"computehub_gpus": 0},
])
def test_offered_options_pass(options):
    assert validate_user_options(options, PROFILES, open_queues=["vision"]) == (options or {})


@pytest.mark.parametrize("options,message", [
    ({"profile": "tpu"}, "no profile 'tpu'; offered: cpu-only, gpu"),
    ({"profile": 3}, "profile must be the name (slug) of one of the offered profiles"),
    ({"profile": "gpu", "image": "evil"}, "image must be one of tf, torch; got 'evil'"),
    ({"profile": "gpu", "image--unlisted-choice": "docker.io/evil:1"}, "image: 'docker.io/evil:1' is refused"),
    ({"profile": "gpu", "image--unlisted-choice": "quay.io/jupyter/x:1\nrm"}, "one line of text"),
    ({"profile": "gpu", "size--unlisted-choice": "xl"}, "size: free-form values are not offered; choose one of m, s"),
    ({"profile": "cpu-only", "image": "tf"}, "unknown server option(s) image"),
    ({"tolerations": [{"operator": "Exists"}]}, "unknown server option(s) tolerations"),
    ({"queue": "nlp"}, "queue 'nlp' is not open to you; yours: vision"),
    ({"computehub_gpus": -1}, "computehub_gpus must be a whole number"),
    (["profile"], "server options must be a mapping"),
])
def test_anything_not_offered_is_refused_with_one_line(options, message):
    with pytest.raises(OptionsError) as e:
        validate_user_options(options, PROFILES, open_queues=["vision"])
    assert message in str(e.value) and "\n" not in str(e.value)
    assert e.value.jupyterhub_message == str(e.value)


def test_no_profiles_no_queue_choice():
    with pytest.raises(OptionsError, match="this hub offers no profiles"):
        validate_user_options({"profile": "gpu"}, [])
    with pytest.raises(OptionsError, match="queue 'vision' is not open to you; yours: none"):
        validate_user_options({"queue": "vision"}, [], open_queues=[])
    with pytest.raises(OptionsError, match="unknown server option"):
        validate_user_options({"queue": "vision"}, [], open_queues=None)


def pod(**spec):
    base = {"containers": [{"name": "notebook", "image": "x",
                            "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False}}]}
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": base}


ALLOWED = admin_allowed({"node_selector": {"pool": "users"}, "tolerations": [], "service_account": ""}, PROFILES)


def test_admin_values_from_base_and_every_profile_and_choice():
    assert ALLOWED["node_selector"] == {("pool", "users"), ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB")}
    assert ALLOWED["service_accounts"] == {"gpu-reader"}
    check_pod(pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                  tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                  serviceAccountName="gpu-reader"), ALLOWED)
    check_pod(pod(nodeName="kube-gpu-1"), ALLOWED)


@pytest.mark.parametrize("spec,message", [
    ({"hostNetwork": True}, "host's namespaces (hostNetwork)"),
    ({"hostPID": True}, "host's namespaces (hostPID)"),
    ({"hostIPC": True}, "host's namespaces (hostIPC)"),
    ({"containers": [{"name": "notebook", "securityContext": {"privileged": True}}]},
     "container 'notebook' would run privileged"),
    ({"initContainers": [{"name": "init", "securityContext": {"allowPrivilegeEscalation": True}}]},
     "container 'init' would allow privilege escalation"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "volume 'root' would mount the host path '/'"),
    ({"nodeSelector": {"kubernetes.io/hostname": "admin-node"}}, "node selector kubernetes.io/hostname=admin-node"),
    ({"nodeSelector": {"pool": "system"}}, "node selector pool=system"),
    ({"tolerations": [{"operator": "Exists"}]}, "toleration None (any effect) is not one an admin configured"),
    ({"serviceAccountName": "hub"}, "service account 'hub' is not one an admin configured"),
])
def test_pod_guard_refuses(spec, message):
    with pytest.raises(PodPolicyError) as e:
        check_pod(pod(**spec), ALLOWED)
    assert message in str(e.value)


def test_an_admin_may_waive_a_check():
    check_pod(pod(volumes=[{"name": "shm", "hostPath": {"path": "/dev/shm"}}]), ALLOWED, waive=["hostPath"])
    with pytest.raises(PodPolicyError):
        check_pod(pod(hostNetwork=True), ALLOWED, waive=["hostPath"])
