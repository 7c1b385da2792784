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
    # the rest of Kubernetes' Pod Security Standards "baseline" level (spawner/pod_guard.py)
    ({"containers": [{"name": "notebook", "securityContext": {"capabilities": {"add": ["NET_RAW", "SYS_ADMIN"]}}}]},
     "container 'notebook' would add the capabilities NET_RAW, SYS_ADMIN"),
    ({"containers": [{"name": "notebook", "securityContext": {"capabilities": {"add": ["cap_sys_ptrace"]}}}]},
     "would add the capabilities SYS_PTRACE"),
    ({"containers": [{"name": "notebook", "ports": [{"containerPort": 8888, "hostPort": 80}]}]},
     "container 'notebook' would open the host port(s) 80"),
    ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
     "the pod would run without a seccomp profile (Unconfined)"),
    ({"containers": [{"name": "notebook", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]},
     "container 'notebook' would run without a seccomp profile"),
    ({"containers": [{"name": "notebook", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]},
     "container 'notebook' would run without an AppArmor profile"),
    ({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}, "the pod would pick its own SELinux label"),
    ({"containers": [{"name": "notebook", "securityContext": {"seLinuxOptions": {"user": "system_u"}}}]},
     "container 'notebook' would pick its own SELinux label"),
    ({"ephemeralContainers": [{"name": "debug", "securityContext": {"procMount": "Unmasked"}}]},
     "container 'debug' would mount /proc unmasked"),
    ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},
     "the pod would set the sysctl 'kernel.msgmax'"),
    ({"securityContext": {"windowsOptions": {"hostProcess": True}}}, "the pod would run as a Windows host process"),
])
def test_pod_guard_refuses(spec, message):
    with pytest.raises(PodPolicyError) as e:
        check_pod(pod(**spec), ALLOWED)
    assert message in str(e.value)


def test_an_admin_may_waive_a_check():
    check_pod(pod(volumes=[{"name": "shm", "hostPath": {"path": "/dev/shm"}}]), ALLOWED, waive=["hostPath"])
    with pytest.raises(PodPolicyError):
        check_pod(pod(hostNetwork=True), ALLOWED, waive=["hostPath"])


def test_what_the_baseline_level_allows_passes():
    """The runtime's default capabilities, RuntimeDefault/Localhost profiles, the usual
    container SELinux types, the default /proc and the safe sysctls are all allowed."""
    check_pod(pod(containers=[{"name": "notebook", "ports": [{"containerPort": 8888, "hostPort": 0}],
                               "securityContext": {"capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE"],
                                                                    "drop": ["ALL"]},
                                                   "seccompProfile": {"type": "RuntimeDefault"},
                                                   "appArmorProfile": {"type": "Localhost",
                                                                       "localhostProfile": "jupyter"},
                                                   "seLinuxOptions": {"type": "container_t", "level": "s0:c1"},
                                                   "procMount": "Default"}}],
                  securityContext={"sysctls": [{"name": "net.ipv4.ping_group_range", "value": "0 2147483647"}],
                                   "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}),
              ALLOWED)
    annotated = pod()
    annotated["metadata"]["annotations"] = {"container.apparmor.security.beta.kubernetes.io/notebook":
                                            "runtime/default"}
    check_pod(annotated, ALLOWED)
    annotated["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/notebook"] = "unconfined"
    with pytest.raises(PodPolicyError, match="AppArmor profile 'unconfined'"):
        check_pod(annotated, ALLOWED)


def test_each_baseline_check_may_be_waived_alone():
    added = pod(containers=[{"name": "notebook", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
                             "ports": [{"containerPort": 22, "hostPort": 2222}]}])
    with pytest.raises(PodPolicyError, match="host port"):
        check_pod(added, ALLOWED, waive=["capabilities"])
    check_pod(added, ALLOWED, waive=["capabilities", "hostPort"])


def test_containers_an_admin_wrote_are_the_admins_choice():
    """z2jh's iptables init container (privileged, NET_ADMIN) comes from the admin's own
    init_containers: not refused. A container of that name that no admin wrote would be."""
    iptables = {"name": "block-cloud-metadata", "image": "quay.io/jupyterhub/k8s-network-tools:4.1.0",
                "command": ["iptables", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "DROP"],
                "securityContext": {"privileged": True, "runAsUser": 0,
                                    "capabilities": {"add": ["NET_ADMIN"]}}}
    allowed = admin_allowed({"init_containers": [iptables]}, PROFILES)
    assert allowed["containers"] == {"block-cloud-metadata"}
    check_pod(pod(initContainers=[iptables]), allowed)
    with pytest.raises(PodPolicyError, match="'block-cloud-metadata' would run privileged"):
        check_pod(pod(initContainers=[iptables]), ALLOWED)
    sidecar = {"name": "proxy", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
    by_profile = admin_allowed({}, [{"display_name": "p", "kubespawner_override": {"extra_containers": [sidecar]}}])
    check_pod(pod(containers=[*pod()["spec"]["containers"], sidecar]), by_profile)
