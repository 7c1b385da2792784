"""What Kubernetes' Pod Security Standards "baseline" level forbids, checked on a pod manifest.

The baseline level (kubernetes.io/docs/concepts/security/pod-security-standards)
is what a namespace's Pod Security Admission enforces with
``pod-security.kubernetes.io/enforce: baseline``. ComputeHub checks it itself,
before any pod is created, so a cluster without that label is guarded too and
the refusal names the field instead of an API server's 403. Each check has a
name an admin may waive (``QueuedKubeSpawner.pod_policy_waive``).

Pure functions over the API JSON (camelCase); nothing imports Kubernetes.
"""

from __future__ import annotations

import copy

# The capabilities a container may add at the baseline level (the container runtime's defaults).
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
# The sysctls Kubernetes calls safe (namespaced, isolated between pods).
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

BASELINE_WAIVABLE = frozenset({"privileged", "hostPath", "hostNetwork", "hostPID", "hostIPC", "hostProcess",
                               "capabilities", "hostPort", "seccomp", "appArmor", "seLinux", "procMount",
                               "sysctls"})


def containers_of(spec: dict) -> list:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def baseline_violations(pod: dict, waive=(), trusted_containers=()) -> list[str]:
    """What the pod does that the baseline level forbids, one phrase each (empty: nothing).

    ``waive``: check names (BASELINE_WAIVABLE) an admin switched off. ``trusted_containers``:
    names of containers an admin wrote into the configuration (e.g. z2jh's iptables init
    container), whose own settings are the admin's choice and not checked.
    """
    waive = set(waive)
    return [phrase for name, phrase in baseline_findings(pod, trusted_containers) if name not in waive]


def baseline_findings(pod: dict, trusted_containers=()) -> list[tuple[str, str]]:
    """(check name, phrase) of each thing the pod does that the baseline level forbids."""
    trusted = set(trusted_containers)
    spec = pod.get("spec") or {}
    found = []

    def check(name: str, bad: bool, phrase: str):
        if bad:
            found.append((name, phrase))

    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        check(flag, bool(spec.get(flag)), f"the pod would use the host's namespaces ({flag})")
    psc = spec.get("securityContext") or {}
    _security_context(check, psc, "the pod")
    for s in psc.get("sysctls") or []:
        check("sysctls", s.get("name") not in SAFE_SYSCTLS, f"the pod would set the sysctl {s.get('name')!r}")
    for v in spec.get("volumes") or []:
        check("hostPath", v.get("hostPath") is not None,
              f"volume {v.get('name')!r} would mount the host path {(v.get('hostPath') or {}).get('path')!r}")
    for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION):
            check("appArmor", not (value == "runtime/default" or str(value).startswith("localhost/")),
                  f"the annotation {key} would run it under the AppArmor profile {value!r}")
    for c in containers_of(spec):
        if c.get("name") in trusted:
            continue
        who = f"container {c.get('name')!r}"
        sc = c.get("securityContext") or {}
        check("privileged", bool(sc.get("privileged")), f"{who} would run privileged")
        _security_context(check, sc, who)
        added = sorted({str(a).upper().removeprefix("CAP_") for a in (sc.get("capabilities") or {}).get("add") or []}
                       - BASELINE_CAPABILITIES)
        check("capabilities", bool(added), f"{who} would add the capabilities {', '.join(added)}")
        check("procMount", sc.get("procMount") not in (None, "Default"), f"{who} would mount /proc unmasked")
        ports = sorted({p.get("hostPort") for p in c.get("ports") or [] if p.get("hostPort")})
        check("hostPort", bool(ports), f"{who} would open the host port(s) {', '.join(map(str, ports))}")
    return found


def _security_context(check, sc: dict, who: str) -> None:
    """The checks a pod's and a container's securityContext share."""
    check("hostProcess", bool((sc.get("windowsOptions") or {}).get("hostProcess")),
          f"{who} would run as a Windows host process")
    check("seccomp", (sc.get("seccompProfile") or {}).get("type") == "Unconfined",
          f"{who} would run without a seccomp profile (Unconfined)")
    check("appArmor", (sc.get("appArmorProfile") or {}).get("type") == "Unconfined",
          f"{who} would run without an AppArmor profile (Unconfined)")
    se = sc.get("seLinuxOptions") or {}
    check("seLinux", se.get("type", "") not in SELINUX_TYPES or bool(se.get("user")) or bool(se.get("role")),
          f"{who} would pick its own SELinux label")


# ---- the "restricted" level: what a namespace enforcing it admits (job and notebook pods, on request) -

RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})


def harden_for_restricted(spec: dict) -> None:
    """Fill in what the restricted level asks for and the pod leaves unsaid: the runtime's default
    seccomp profile, no capabilities beyond NET_BIND_SERVICE, no privilege escalation, not root
    (where no container says otherwise). What a pod states is kept, and judged by
    ``restricted_violations``."""
    psc = spec["securityContext"] = copy.deepcopy(spec.get("securityContext") or {})   # (a template's own)
    psc.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    if psc.get("runAsUser") != 0:
        psc.setdefault("runAsNonRoot", True)
    for c in containers_of(spec):
        sc = c["securityContext"] = copy.deepcopy(c.get("securityContext") or {})
        sc.setdefault("allowPrivilegeEscalation", False)
        sc.setdefault("capabilities", {}).setdefault("drop", ["ALL"])


def restricted_violations(pod: dict) -> list[str]:
    """What the pod does that the restricted level forbids, beyond the baseline's, one phrase each."""
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    found = [phrase for name, phrase in baseline_findings(pod) if name != "capabilities"]   # (stricter below)
    for v in spec.get("volumes") or []:
        kinds = sorted(set(v) - {"name"} - RESTRICTED_VOLUMES)
        if kinds:
            found.append(f"volume {v.get('name')!r} is of type {kinds[0]}")
    for c in containers_of(spec):
        who, sc = f"container {c.get('name')!r}", c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{who} does not forbid privilege escalation")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        if non_root is not True or uid == 0:
            found.append(f"{who} may run as root (runAsNonRoot is not true, or runAsUser is 0)")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{who} has no seccomp profile (RuntimeDefault or Localhost)")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{who} does not drop ALL capabilities")
        extra = sorted({str(a).upper().removeprefix("CAP_") for a in caps.get("add") or []} - {"NET_BIND_SERVICE"})
        if extra:
            found.append(f"{who} adds the capabilities {', '.join(extra)}")
    return found
