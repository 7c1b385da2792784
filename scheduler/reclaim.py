"""Where idle reclamation is decided: warn, then release.

The caller supplies the idle signal (no kernel activity and ~0 % GPU since
``idle_since``); the queue's ``IdlePolicy`` says when to warn and when to take
the resources back. Each release records the GPU-hours that sat idle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .model import IdlePolicy, Workload

NONE, WARN, RELEASE = "none", "warn", "release"


@dataclass
class IdleDecision:
    action: str
    idle_seconds: float
    warn_after: float | None
    release_after: float | None
    gpus: int = 0
    gpu_hours_returned: float = 0.0
    release_at: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def decide(w: Workload, policy: IdlePolicy, idle_since: float, now: float) -> IdleDecision:
    idle = max(0.0, now - idle_since)
    d = IdleDecision(NONE, idle, policy.warn_after, policy.release_after, gpus=w.gpus)
    if policy.release_after is not None:
        d.release_at = idle_since + policy.release_after
        if idle >= policy.release_after:
            d.action = RELEASE
            d.gpu_hours_returned = w.gpus * idle / 3600.0
            return d
    if policy.warn_after is not None and idle >= policy.warn_after:
        already = w.idle_warned_at is not None and w.idle_warned_at >= idle_since
        if not already:
            d.action = WARN
    return d
