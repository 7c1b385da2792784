"""What a replay assumes about things the trace does not record: the cost of a
preemption and the run-time limits jobs declare.

Restart cost (``Restart``): a preempted job resumes from its last checkpoint.
It checkpoints every ``checkpoint_s`` seconds of progress, so the work since
the last checkpoint is lost, and every restart spends ``restart_s`` seconds
(reloading the checkpoint, warming up) before it makes progress again.
``Restart(0, 0)`` is free preemption (Tiresias' simulator assumes it);
``REALISTIC`` = 60 s per restart plus checkpoints every 30 minutes (on average
15 minutes of work lost per preemption) is what the benchmarks charge.

Declared limits: a real scheduler does not know durations. ``declared_limit``
models what a job declares as its run-time limit:

* ``oracle``: its true duration (the reference policies "with known durations");
* ``estimate``: its true duration × a per-job over-estimate factor, uniform in
  [1, ``overestimate``] (3 by default) and derived from the job id (its hex
  digits 9..16, dashes removed; CRC-32 for other ids), the same for every
  policy. Users over-estimate to avoid being killed; the factor is never < 1;
* ``none``: nothing declared.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

LIMIT_MODES = ("oracle", "estimate", "none")
OVERESTIMATE = 3.0


@dataclass(frozen=True)
class Restart:
    restart_s: float = 0.0       # seconds each restart spends before progress resumes
    checkpoint_s: float = 0.0    # seconds of progress between checkpoints; 0 = no work lost

    def __post_init__(self):
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise ValueError(f"restart cost must be ≥ 0 seconds, not {self.restart_s}")
        if not (math.isfinite(self.checkpoint_s) and self.checkpoint_s >= 0):
            raise ValueError(f"checkpoint interval must be ≥ 0 seconds, not {self.checkpoint_s}")

    @property
    def free(self) -> bool:
        return self.restart_s == 0 and self.checkpoint_s == 0

    def saved(self, progress: float) -> float:
        """Progress (seconds) that survives a preemption: up to the last checkpoint."""
        if self.checkpoint_s <= 0:
            return progress
        return math.floor(progress / self.checkpoint_s + 1e-9) * self.checkpoint_s

    def describe(self) -> str:
        if self.free:
            return "free (no restart time, no work lost)"
        ck = f"checkpoints every {self.checkpoint_s:g} s" if self.checkpoint_s else "continuous checkpoints"
        return f"{self.restart_s:g} s per restart + work since the last checkpoint ({ck})"


FREE = Restart()
REALISTIC = Restart(60.0, 1800.0)


def overestimate_factor(job_id: str, top: float = OVERESTIMATE) -> float:
    """The job's over-estimate factor, uniform in [1, top], from its id (deterministic)."""
    digits = job_id.replace("-", "")[8:16]
    try:
        u = int(digits, 16) / 16 ** len(digits) if digits else zlib.crc32(job_id.encode()) / 2 ** 32
    except ValueError:
        u = zlib.crc32(job_id.encode()) / 2 ** 32
    return 1.0 + (top - 1.0) * u


def declared_limit(job, mode: str, top: float = OVERESTIMATE) -> float | None:
    """The run-time limit (seconds) ``job`` declares under ``mode`` (see the module doc)."""
    if mode == "oracle":
        return job.duration
    if mode == "estimate":
        return job.duration * overestimate_factor(job.id, top)
    if mode == "none":
        return None
    raise ValueError(f"declared_limits must be one of {', '.join(LIMIT_MODES)}, not {mode!r}")
