"""A notebook pod brought to the Pod Security Standards' restricted level (QueuedKubeSpawner's
``pod_security = "restricted"``): ``pod_guard.harden_for_restricted`` (the job pods' rules) fills
in what the level asks for and the configuration leaves unsaid, on the API form of the pod, and
the security contexts it settles are written back into KubeSpawner's own pod object; what the
configuration states is kept, and judged by ``pod_guard.restricted_violations`` afterwards."""

from __future__ import annotations

from .pod_guard import harden_for_restricted

GROUPS = (("initContainers", "init_containers"), ("containers", "containers"),
          ("ephemeralContainers", "ephemeral_containers"))


def harden_notebook_pod(pod, serialize) -> None:
    """``pod``: the V1Pod KubeSpawner built (its parts are API models or, as configured, dicts);
    ``serialize``: the API client's ``sanitize_for_serialization``."""
    spec = serialize(pod.spec)
    harden_for_restricted(spec)
    pod.spec.security_context = spec["securityContext"]
    for group, attr in GROUPS:
        containers = []
        for c, hardened in zip(getattr(pod.spec, attr) or [], spec.get(group) or []):
            if isinstance(c, dict):         # an admin's container as configured: a copy, not the config's
                c = {**{k: v for k, v in c.items() if k != "security_context"},
                     "securityContext": hardened["securityContext"]}
            else:
                c.security_context = hardened["securityContext"]
            containers.append(c)
        if containers:
            setattr(pod.spec, attr, containers)
