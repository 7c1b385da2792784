"""What the QueuedKubeSpawner tests share: the pinned Kubernetes version the manifests are
validated against, the namespace, and the admin's profiles (one of them a mistake the pod
guard must refuse)."""

from __future__ import annotations

K8S_VERSION = "1.33.0"      # pinned; an unbundled version would "validate" anything
NS = "hub"
A100 = "NVIDIA-A100-SXM4-80GB"

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True,
     "kubespawner_override": {"cpu_limit": 1, "mem_limit": "1G"}},
    {"display_name": "1 × A100", "slug": "a100",
     "kubespawner_override": {
         "cpu_limit": 2, "mem_limit": "2G",
         "extra_resource_limits": {"nvidia.com/gpu": "1"},
         "node_selector": {"nvidia.com/gpu.product": A100},
         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
     "profile_options": {"image": {"display_name": "Image", "choices": {
         "torch": {"display_name": "PyTorch", "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:2025-01-06"}},
         "tf": {"display_name": "TensorFlow", "kubespawner_override": {"image": "quay.io/jupyter/tensorflow-notebook:2025-01-06"}},
     }}}},
    # An admin's mistake: the pod guard refuses it unless pod_policy_waive says otherwise.
    {"display_name": "Debug", "slug": "debug", "kubespawner_override": {"cpu_limit": 1, "mem_limit": "1G",
                                                                         "privileged": True}},
]


def notebook(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "notebook")
