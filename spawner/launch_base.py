"""What a launcher backend is: the interface the launcher driver (``launcher_app``) drives.

A *launcher* turns admitted ``training`` / ``inference`` / ``batch`` workloads into
running things and reports back through the REST API (docs/launchers.md). The
driver (``spawner.launcher_app.LauncherApp``) watches the service; a *backend*
(``LauncherBackend`` subclass) knows how to run work somewhere:
``spawner.launch_local.LocalLauncher`` (processes on this machine) or a
Kubernetes one (Jobs, Deployments).

Every method gets the workload as the REST API returns it (``GET
api/v1/workloads/{id}``: ``id``, ``user``, ``kind``, ``workers``, ``resources``,
``placement`` = one ``{"node", "gpus": [index, ...]}`` per worker, ``time_limit``,
``metadata``). What to run is in ``metadata["job"]`` (see ``job_of``), written by
the ``%submit`` / ``%serve`` magics, the Python client or the CLI.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

from traitlets import Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from scheduler.job_env import RESERVED_ENV, reserved  # noqa: F401 (RESERVED_ENV: re-exported)

from .launcher_settings import BackendChecks

# Environment variables every backend sets for a job (users cannot override them).
CHECKPOINT_ENV = "COMPUTEHUB_CHECKPOINT_DIR"   # a per-workload folder that survives preemption
REPORT_TOKEN_ENV = "COMPUTEHUB_REPORT_TOKEN"    # lets the job report its own saves, nothing more
# Names users cannot set (theirs are dropped, ``scheduler.job_env.reserved``): the launcher's own
# (RESERVED_ENV, with the two above), and the container runtime's (NVIDIA_*:
# NVIDIA_VISIBLE_DEVICES=all would widen a pod to every GPU of its node), which the service also
# refuses with a 400 at submission.
MAX_ARGS = 1000
MAX_SCRIPT = 512 * 1024


class StartLater(Exception):
    """The workload cannot be started yet, for a reason that passes by itself (what an earlier
    run left is still going away). The driver leaves it admitted and tries again at its next
    look; nothing is reported."""


class LaunchError(Exception):
    """The workload cannot be started as asked (a bad job description, a refused working
    directory, a user that may not run here). The driver reports it ``failed`` with this
    message as the reason; it is the user's to fix, so it is one clear line."""


@dataclass
class Ended:
    """How a workload ended: its exit code, a plain reason and the last lines of its log.
    ``node_lost``: the node it ran on went away, or the cluster would not run it (not the
    job's own doing): requeued if its class requeues. ``checkpoint``: when it last saved, as
    the backend saw it once stopped (a save on SIGTERM shows here). ``restarted``: it did not
    end, the platform restarted it in place this many times since the last look (Kubernetes,
    restartPolicy Always): the driver counts these against ``max_restarts`` and restarts
    nothing itself. ``final``: starting it again cannot help (its image cannot be pulled, its
    objects were deleted by hand): an inference service is not restarted."""

    exit_code: int
    reason: str = ""
    last_lines: list[str] = field(default_factory=list)
    node_lost: bool = False
    restarted: int = 0
    final: bool = False
    checkpoint: float | None = None   # from ``stop``: its newest checkpoint then (UNIX time), if seen


@dataclass
class Job:
    """What to run, checked (see ``job_of``)."""

    command: list[str]            # argv; for inference the command may use $PORT
    workdir: str = ""             # where it runs ('' = the user's home)
    script: str | None = None     # %%submit: the cell, written to a file the command names as {script}
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None       # inference: the port it listens on (None: the launcher picks, in $PORT)
    shell: bool = False           # inference: run the command through /bin/sh -c (so $PORT expands)


def job_of(workload: dict) -> Job:
    """The checked ``metadata["job"]`` of a workload, or ``LaunchError`` saying what is wrong.

    ``{"command": [argv...] | "shell text", "workdir": "/home/alice/proj", "script": "cell text",
    "env": {"NAME": "value"}, "port": 8080}``. A string command runs through ``/bin/sh -c``.
    """
    job = (workload.get("metadata") or {}).get("job")
    if not isinstance(job, dict):
        raise LaunchError("nothing to run: metadata.job is missing (submit with %submit, %serve or "
                          "'computehub submit --command ...')")
    cmd, shell = job.get("command"), False
    if isinstance(cmd, str):
        cmd, shell = ["/bin/sh", "-c", cmd], True
    if (not isinstance(cmd, list) or not cmd or len(cmd) > MAX_ARGS
            or not all(isinstance(a, str) and "\x00" not in a for a in cmd)):
        raise LaunchError("metadata.job.command must be a non-empty list of arguments (text) or a shell line")
    workdir = job.get("workdir") or ""
    if not isinstance(workdir, str) or (workdir and not os.path.isabs(workdir)):
        raise LaunchError(f"metadata.job.workdir must be an absolute path, not {workdir!r}")
    script = job.get("script")
    if script is not None and (not isinstance(script, str) or len(script) > MAX_SCRIPT):
        raise LaunchError(f"metadata.job.script must be text of at most {MAX_SCRIPT // 1024} KiB")
    env = job.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) and k and "=" not in k
                                            and "\x00" not in k + v for k, v in env.items()):
        raise LaunchError("metadata.job.env must map variable names to text values")
    env = {k: v for k, v in env.items() if not reserved(k)}
    port = job.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535):
        raise LaunchError(f"metadata.job.port must be a port from 1024 to 65535, not {port!r}")
    return Job(command=list(cmd), workdir=workdir, script=script, env=env, port=port, shell=shell)


def gpus_of(workload: dict, rank: int) -> list[int]:
    """GPU indices the scheduler assigned to worker ``rank`` (``placement`` has one entry per worker)."""
    placement = workload.get("placement") or []
    return list(placement[rank].get("gpus", [])) if rank < len(placement) else []


class LauncherBackend(BackendChecks, LoggingConfigurable):
    """Runs admitted workloads somewhere. All methods are coroutines and must not block
    the event loop for long (the driver runs them for many workloads at once).

    A backend is stateless across its own restarts except for what it can find again
    (processes, Kubernetes objects): ``adopt`` is how the driver reattaches after a
    launcher restart.
    """

    logs_dir = Unicode(config=True, help="""Folder of the job logs, one '<workload id>.log' per workload.
        The service serves GET workloads/{id}/logs from '<its data_dir>/logs', so a local launcher
        writes there (default: $COMPUTEHUB_DATA_DIR/logs, else ./computehub-data/logs).""")
    last_lines_count = Integer(20, config=True,
                               help="How many last log lines go into a failed workload's reason (lines).")

    def launcher_service_url(self) -> str:
        """The service URL of the launcher driving this backend ('' outside one): where its
        jobs reach the service too, unless configured otherwise."""
        return getattr(self.parent, "computehub_url", "") or ""

    @default("logs_dir")
    def _logs_dir(self):
        data = os.environ.get("COMPUTEHUB_DATA_DIR") or os.path.abspath("computehub-data")
        return os.path.join(data, "logs")

    async def start(self, workload: dict) -> dict:
        """Start every worker of an admitted workload. Returns notes for the service
        (``node``, ``message``, ``endpoint`` — the fields of ``POST workloads/{id}/status``).
        Raises ``LaunchError`` for a job that cannot run as asked."""
        raise NotImplementedError

    async def poll(self, workload: dict) -> Ended | None:
        """None while it runs; ``Ended`` once it (all its workers) stopped by itself."""
        raise NotImplementedError

    async def stop(self, workload: dict, grace_seconds: float) -> Ended | None:
        """Stop it: SIGTERM (or the platform's equivalent), ``grace_seconds`` to finish
        (checkpoint), then kill. Returns how it ended, if known. Stopping what is not
        running is fine."""
        raise NotImplementedError

    async def ready(self, workload: dict) -> str | None:
        """For inference: the endpoint URL (``http://host:port``) once it answers, else None."""
        return None

    async def last_checkpoint(self, workload: dict) -> float | None:
        """When running work last saved a checkpoint (UNIX time), as far as this backend can
        see; None where it cannot. The driver reports what is new to the service, so that
        preemption knows what stopping the work would lose. Default: None (jobs may report
        themselves: ``POST workloads/{id}/checkpoint``)."""
        return None

    async def adopt(self, workload: dict) -> bool:
        """After a launcher restart: True if this workload's work is still known here (running,
        or ended with a result ``poll`` will report), and is tracked again; False if nothing of
        it is left."""
        return False

    async def restart(self, workload: dict) -> dict:
        """Start a crashed inference workload again (same placement). Default: ``start``."""
        return await self.start(workload)

    async def cleanup(self, workload: dict) -> None:
        """Work that ended by itself, once the service has heard how: remove what is left of
        it (a platform's objects), so that nothing lingers and a requeued workload starts
        afresh. Default: nothing (ended processes leave nothing)."""

    async def close(self) -> None:
        """The driver is shutting down (work keeps running unless the backend says otherwise)."""

    # --- logs ----------------------------------------------------------------------

    def log_path(self, workload: dict) -> str:
        return os.path.join(self.logs_dir, f"{workload['id']}.log")

    def last_lines(self, workload: dict, n: int | None = None) -> list[str]:
        """The last ``n`` lines of the workload's log (reading only the end of a big file)."""
        n = self.last_lines_count if n is None else n
        try:
            with open(self.log_path(workload), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                tail = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []
        return list(deque(tail, maxlen=n)) if n > 0 else []
