"""Checks of the launcher's settings (``LauncherApp``, ``LocalLauncher``, ``KubeLauncher``), made
when they are set and once more at start (``LauncherApp.initialize``), so that a mistaken
setting stops the launcher with one line instead of failing each job later, or worse, running
it where it must not (two users sharing a home, every job stopped at once). Mixins; see
scheduler/config_checks.py."""

from __future__ import annotations

import os
import re

from traitlets import validate

from scheduler.config_checks import (ConfigError, check_existing_file, check_number, check_resource_name,
                                      check_template, check_url)

KINDS = ("training", "inference", "batch")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _name(obj, trait: str) -> str:
    return f"{type(obj).__name__}.{trait}"


class LauncherAppChecks:
    @validate("poll_interval")
    def _poll_ok(self, proposal):
        return check_number(_name(self, "poll_interval"), proposal.value, low=0, low_open=True, unit="seconds")

    @validate("preempt_grace", "cancel_grace")
    def _grace_ok(self, proposal):
        return check_number(_name(self, proposal.trait.name), proposal.value, low=0, unit="seconds")

    @validate("max_restarts")
    def _restarts_ok(self, proposal):
        return check_number(_name(self, "max_restarts"), proposal.value, low=0, unit="count")

    @validate("enforce_time_limit")
    def _limit_ok(self, proposal):
        # Below 1 would stop jobs before the time limit they declared (below 0: every job at once).
        return check_number(_name(self, "enforce_time_limit"), proposal.value, low=1, off=0,
                            unit="times the declared time limit")

    @validate("kinds")
    def _kinds_ok(self, proposal):
        bad = [k for k in proposal.value if k not in KINDS]
        if bad or not proposal.value:
            raise ConfigError(f"{_name(self, 'kinds')} must list some of {', '.join(KINDS)} (notebooks "
                              f"are the spawners'), not {list(proposal.value)!r}")
        return proposal.value


class BackendChecks:
    @validate("last_lines_count")
    def _lines_ok(self, proposal):
        return check_number(_name(self, "last_lines_count"), proposal.value, low=0, unit="lines")


class LocalLauncherChecks:
    @validate("ready_timeout")
    def _ready_timeout_ok(self, proposal):
        return check_number(_name(self, "ready_timeout"), proposal.value, low=0, unit="seconds")

    @validate("allowed_roots")
    def _roots_ok(self, proposal):
        for root in proposal.value:
            check_template(_name(self, "allowed_roots") + " entry", root, ("username",))
            if not os.path.isabs(root):
                raise ConfigError(f"{_name(self, 'allowed_roots')}: {root!r} is not an absolute path "
                                  "(e.g. '/data/{username}')")
        return proposal.value

    @validate("home_template")
    def _home_ok(self, proposal):
        value = proposal.value
        if value:
            check_template(_name(self, "home_template"), value, ("username",), ("username",),
                           why="every user without an OS account would share one home")
            if not os.path.isabs(value):
                raise ConfigError(f"{_name(self, 'home_template')} must be an absolute path like "
                                  f"'/srv/computehub/homes/{{username}}', not {value!r}")
        return value

    @validate("run_dir_template", "checkpoint_dir_template")
    def _dir_template_ok(self, proposal):
        name = _name(self, proposal.trait.name)
        check_template(name, proposal.value, ("home", "id", "username"), ("id",),
                       why="each workload needs a folder of its own")
        if not os.path.isabs(proposal.value.format(home="/h", id="w", username="u")):
            raise ConfigError(f"{name} must give an absolute path (start with '/' or '{{home}}'), "
                              f"not {proposal.value!r}")
        return proposal.value

    @validate("min_uid", "max_uid")
    def _uid_ok(self, proposal):
        return check_number(_name(self, proposal.trait.name), proposal.value, low=0, unit="a uid")

    @validate("host")
    def _host_ok(self, proposal):
        if not proposal.value or any(c.isspace() or c == "/" for c in proposal.value):
            raise ConfigError(f"{_name(self, 'host')} must be a host name or address like 127.0.0.1, "
                              f"not {proposal.value!r}")
        return proposal.value

    @validate("job_computehub_url")
    def _job_url_ok(self, proposal):
        return check_url(_name(self, "job_computehub_url"), proposal.value, empty_ok=True)


class KubeLauncherChecks:
    @validate("namespace")
    def _namespace_ok(self, proposal):
        if not DNS_LABEL.match(proposal.value):
            raise ConfigError(f"{_name(self, 'namespace')} must be a Kubernetes namespace name (lower-case "
                              f"letters, digits and '-', at most 63), not {proposal.value!r}")
        return proposal.value

    @validate("kubeconfig")
    def _kubeconfig_ok(self, proposal):
        return check_existing_file(_name(self, "kubeconfig"), proposal.value)

    @validate("gpu_resource")
    def _resource_ok(self, proposal):
        return check_resource_name(_name(self, "gpu_resource"), proposal.value)

    @validate("priority_class_template")
    def _pc_template_ok(self, proposal):
        return check_template(_name(self, "priority_class_template"), proposal.value, ("priority",))

    @validate("checkpoint_dir_template")
    def _ckpt_ok(self, proposal):
        return check_template(_name(self, "checkpoint_dir_template"), proposal.value, ("home", "id", "username"), ("id",),
                              why="each workload needs a folder of its own")

    @validate("termination_grace_seconds", "container_start_grace", "unscheduled_grace")
    def _grace_ok(self, proposal):
        return check_number(_name(self, proposal.trait.name), proposal.value, low=0, unit="seconds")

    @validate("master_port", "inference_port")
    def _port_ok(self, proposal):
        return check_number(_name(self, proposal.trait.name), proposal.value, low=1, high=65535, unit="a port")

    @validate("pod_computehub_url")
    def _pod_url_ok(self, proposal):
        return check_url(_name(self, "pod_computehub_url"), proposal.value, empty_ok=True)

    @validate("default_image", "default_home")
    def _not_empty(self, proposal):
        if not proposal.value.strip():
            raise ConfigError(f"{_name(self, proposal.trait.name)} must not be empty")
        return proposal.value
