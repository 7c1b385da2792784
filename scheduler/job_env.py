"""Environment variables of a job (``metadata.job.env``) that are the platform's, not the user's.

Shared by the service, which refuses a submission setting a runtime-controlling name with a
400 (``check_job_env``), and the launchers (``spawner/launch_base.job_of``), which drop every
reserved name whatever a workload carries (work accepted before this check, or from a spawner).

Two kinds:

* ``RESERVED_ENV``: names a launcher sets itself for every job (its GPUs, rank, checkpoint
  folder, report token, who it runs as). A user's value is dropped and the launcher's used;
  documented as such, so the service accepts them (and the launcher drops them).
* runtime names (``NVIDIA_*``): read by the NVIDIA container runtime when it builds the
  container, *before* the job runs. A pod's own ``env`` wins over the device plugin's
  ``NVIDIA_VISIBLE_DEVICES``, so ``NVIDIA_VISIBLE_DEVICES=all`` in a job's env would give it
  every GPU of its node, whatever it was allotted (or none). These are refused at the edge.
"""

from __future__ import annotations

from .errors import ValidationError

# Set by the launchers for every job: a user's value is dropped (docs/launchers.md).
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PORT", "COMPUTEHUB_WORKLOAD_ID",
                          "COMPUTEHUB_CHECKPOINT_DIR", "COMPUTEHUB_REPORT_TOKEN", "COMPUTEHUB_EXIT_FILE",
                          "COMPUTEHUB_ARRAY_ID", "COMPUTEHUB_ARRAY_TASK_ID", "COMPUTEHUB_ARRAY_TASK_COUNT",
                          "HOME", "USER", "LOGNAME", "SHELL"})
# Read by the container runtime (NVIDIA Container Toolkit: NVIDIA_VISIBLE_DEVICES,
# NVIDIA_DRIVER_CAPABILITIES, NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_REQUIRE_*, ...): they decide
# which devices and driver powers the container gets. Never a user's to set.
RUNTIME_PREFIXES = ("NVIDIA_",)


def runtime_name(name: str) -> bool:
    return name.upper().startswith(RUNTIME_PREFIXES)


def reserved(name: str) -> bool:
    """Whether a launcher drops ``name`` from a job's env."""
    return name in RESERVED_ENV or runtime_name(name)


def check_job_env(metadata) -> None:
    """Refuse a submission whose ``metadata.job.env`` sets a runtime-controlling name. Other
    shapes are left to the launcher, which fails such work with its own reason."""
    job = metadata.get("job") if isinstance(metadata, dict) else None
    env = job.get("env") if isinstance(job, dict) else None
    if not isinstance(env, dict):
        return
    bad = sorted(k for k in env if isinstance(k, str) and runtime_name(k))
    if bad:
        raise ValidationError(
            f"metadata.job.env sets {', '.join(bad[:5])}{' …' if len(bad) > 5 else ''}: variables named "
            "NVIDIA_* are read by the container runtime and decide which GPUs a job gets, so ComputeHub "
            "sets them, not a submission; remove them (your job gets the GPUs it asked for in resources)")
