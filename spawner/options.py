"""What a user may ask of a spawner, and what a notebook pod may do (pure functions).

A user chooses among what an admin offers: a profile of the admin's
``profile_list``, one of the offered choices of its ``profile_options``, a
queue open to one of their groups. Anything else — an unknown key, a choice
not offered, a free-form value where none is enabled, another team's queue —
is refused with one line that the spawn form (or the REST API's 400) shows.

``check_pod`` guards the final pod manifest: whatever overrides were applied,
a pod may not do what Kubernetes' Pod Security Standards "baseline" level
forbids (run privileged, share the host's network/PID/IPC namespaces, mount host
paths, open host ports, add capabilities beyond the default set, run
unconfined by seccomp or AppArmor, pick SELinux labels, unmask /proc, set unsafe
sysctls; ``pod_guard.py``), escalate privileges, or carry node selectors,
tolerations or a service account that the admin did not configure somewhere.

Nothing here imports JupyterHub or Kubernetes: the local spawner can use it too.
"""

from __future__ import annotations

import re

from .pod_guard import BASELINE_WAIVABLE, baseline_violations, containers_of

# Keys the hub itself may put in user options (the reclaimer restarts a notebook
# with fewer GPUs: spawner/queueing.py's requested_gpus checks the value).
HUB_KEYS = frozenset({"computehub_gpus"})
MAX_FREE_FORM = 256
WAIVABLE = BASELINE_WAIVABLE | {"allowPrivilegeEscalation"}


class OptionsError(ValueError):
    """A user option the admin did not offer. ``str()`` is the one line the user sees."""

    @property
    def jupyterhub_message(self) -> str:   # JupyterHub's spawn form shows this attribute
        return str(self)


class PodPolicyError(OptionsError):
    """The final pod manifest would do something no admin allowed."""


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-") or "profile"


def profiles_with_slugs(profile_list) -> list[dict]:
    """The profiles with a ``slug`` each (from display_name where missing, like KubeSpawner)."""
    out = []
    for p in profile_list or []:
        p = dict(p)
        p.setdefault("slug", slugify(p.get("display_name", "")))
        out.append(p)
    return out


def _default_profile(profiles: list[dict]) -> dict | None:
    return next((p for p in profiles if p.get("default")), profiles[0] if profiles else None)


def _names(items) -> str:
    return ", ".join(sorted(map(str, items))) or "none"


def validate_user_options(options, profile_list=(), open_queues=None) -> dict:
    """Check ``options`` against what the admin offers; returns them, or raises OptionsError.

    ``profile_list``: the admin's profiles (KubeSpawner's format); empty when none are offered.
    ``open_queues``: names of the queues open to this user, or None when no ``queue`` may be chosen.
    """
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise OptionsError("server options must be a mapping of option names to values")
    profiles = profiles_with_slugs(profile_list)
    allowed = set(HUB_KEYS) | {"profile"} | ({"queue"} if open_queues is not None else set())
    slug = options.get("profile")
    if slug in (None, ""):
        profile = _default_profile(profiles)
    elif not isinstance(slug, str):
        raise OptionsError("profile must be the name (slug) of one of the offered profiles")
    elif not profiles:
        raise OptionsError(f"profile {slug!r} asked for, but this hub offers no profiles")
    else:
        profile = next((p for p in profiles if p["slug"] == slug), None)
        if profile is None:
            raise OptionsError(f"no profile {slug!r}; offered: {_names(p['slug'] for p in profiles)}")
    for name, opt in ((profile or {}).get("profile_options") or {}).items():
        allowed.add(name)
        _check_choice(name, opt, options.get(name))
        free_key = f"{name}--unlisted-choice"
        free = options.get(free_key)
        unlisted = opt.get("unlisted_choice") or {}
        if unlisted.get("enabled"):
            allowed.add(free_key)
            _check_free_form(name, unlisted, free)
        elif free not in (None, ""):
            raise OptionsError(f"{name}: free-form values are not offered; choose one of "
                               f"{_names((opt.get('choices') or {}).keys())}")
    unknown = set(options) - allowed
    if unknown:
        raise OptionsError(f"unknown server option(s) {_names(unknown)}; this hub offers: {_names(allowed)}")
    queue = options.get("queue")
    if open_queues is not None and queue not in (None, ""):
        if not isinstance(queue, str) or queue not in set(open_queues):
            raise OptionsError(f"queue {queue!r} is not open to you; yours: {_names(open_queues)}")
    gpus = options.get("computehub_gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise OptionsError("computehub_gpus must be a whole number of GPUs, 0 or more")
    return options


def _check_choice(name: str, opt: dict, value) -> None:
    if value in (None, ""):
        return
    choices = opt.get("choices") or {}
    if not isinstance(value, str) or value not in choices:
        raise OptionsError(f"{name} must be one of {_names(choices)}; got {value!r}")


def _check_free_form(name: str, unlisted: dict, value) -> None:
    if value in (None, ""):
        return
    if not isinstance(value, str) or len(value) > MAX_FREE_FORM or any(ord(ch) < 32 for ch in value):
        raise OptionsError(f"{name}: a free-form value must be one line of text of at most {MAX_FREE_FORM} "
                           "characters")
    regex = unlisted.get("validation_regex")
    if regex and not re.fullmatch(regex, value):
        hint = unlisted.get("validation_message") or f"it must match {regex}"
        raise OptionsError(f"{name}: {value!r} is refused: {hint}")


# ---- what the admin configured (base config and every profile) ---------------------

def _overrides(profile_list):
    for p in profiles_with_slugs(profile_list):
        yield p.get("kubespawner_override") or {}
        for opt in (p.get("profile_options") or {}).values():
            for choice in (opt.get("choices") or {}).values():
                yield choice.get("kubespawner_override") or {}


def _as_list(v) -> list:
    return list(v.values()) if isinstance(v, dict) else list(v or [])


def admin_allowed(base: dict, profile_list=()) -> dict:
    """Node selector pairs, tolerations, service accounts and containers an admin configured anywhere.

    ``base``: the spawner's own configured ``node_selector``, ``tolerations``,
    ``service_account``, ``init_containers`` and ``extra_containers`` (their names:
    an admin's own container, such as z2jh's iptables init container, is the admin's
    choice); plus those of every profile and profile option choice.
    Free-form (unlisted choice) overrides are not admin values: they are not included.
    """
    selectors, tolerations, accounts, containers = set(), [], set(), set()
    for src in [base, *_overrides(profile_list)]:
        for key in ("init_containers", "extra_containers"):
            if not callable(src.get(key)):
                containers |= {c.get("name") for c in src.get(key) or [] if isinstance(c, dict) and c.get("name")}
        if callable(src.get("node_selector")) or callable(src.get("tolerations")):
            continue
        for k, v in (src.get("node_selector") or {}).items():
            if v is not None:
                selectors.add((k, str(v)))
        tolerations += [toleration_key(t) for t in _as_list(src.get("tolerations")) if t]
        if isinstance(src.get("service_account"), str) and src["service_account"]:
            accounts.add(src["service_account"])
    return {"node_selector": selectors, "tolerations": tolerations, "service_accounts": accounts,
            "containers": containers}


def toleration_key(t: dict) -> tuple:
    """A toleration in either spelling (KubeSpawner config or API camelCase) as a comparable tuple."""
    g = t.get
    return (g("key"), g("operator") or "Equal", g("value"), g("effect"),
            g("tolerationSeconds", g("toleration_seconds")))


def check_pod(pod: dict, allowed: dict, waive=()) -> None:
    """Raise PodPolicyError if the pod (API JSON, camelCase) does what no admin allowed.

    ``allowed``: from admin_allowed(). ``waive``: checks an admin explicitly switched off
    (names in WAIVABLE).
    """
    waive = set(waive)
    spec = pod.get("spec") or {}
    refused = baseline_violations(pod, waive, allowed.get("containers", ()))
    if refused:
        raise PodPolicyError(f"refused: {refused[0]}; no admin allowed it")
    for c in containers_of(spec):
        if c.get("name") in allowed.get("containers", ()):
            continue
        if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") and "allowPrivilegeEscalation" not in waive:
            raise PodPolicyError(f"refused: container {c.get('name')!r} would allow privilege escalation; "
                                 "no admin allowed it")
    bad = sorted(f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items()
                 if (k, str(v)) not in allowed["node_selector"])
    if bad:
        raise PodPolicyError(f"refused: node selector {', '.join(bad)} is not one an admin configured")
    for t in spec.get("tolerations") or []:
        if toleration_key(t) not in allowed["tolerations"]:
            raise PodPolicyError(f"refused: toleration {t.get('key')!r} ({t.get('effect') or 'any effect'}) "
                                 "is not one an admin configured")
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account and account != "default" and account not in allowed["service_accounts"]:
        raise PodPolicyError(f"refused: service account {account!r} is not one an admin configured")
