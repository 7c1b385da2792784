"""Trace replay: the real scheduler on a virtual clock, and the metrics it is judged by.

    >>> from scheduler.replay import load, simulate, SAMPLE_TRACE, default_capacity
    >>> jobs = load(SAMPLE_TRACE)
    >>> simulate(jobs, default_capacity(jobs), policy="fifo")["jct_avg_h"]   # doctest: +SKIP

``trace`` reads CSV traces and derives tenants, ``simulate`` runs the replay
through ``scheduler.Scheduler`` (the engine the live service uses), ``metrics``
defines and computes the numbers. See docs/simulate.md.
"""

from pathlib import Path

from .costs import FREE, LIMIT_MODES, OVERESTIMATE, REALISTIC, Restart, declared_limit, overestimate_factor
from .metrics import floors, jain, percentile, summarize, table
from .simulate import DECLARED_LIMITS, POLICIES, Outcome, StuckError, run, simulate
from .trace import Job, default_capacity, load, mean_gpus_busy, team_of

SAMPLE_TRACE = Path(__file__).parent / "samples" / "cluster05-first400.csv"

__all__ = [
    "DECLARED_LIMITS", "FREE", "LIMIT_MODES", "OVERESTIMATE", "REALISTIC", "Restart", "declared_limit",
    "overestimate_factor", "Job", "Outcome", "POLICIES", "SAMPLE_TRACE", "StuckError", "default_capacity",
    "floors", "jain", "load", "mean_gpus_busy", "percentile", "run", "simulate", "summarize", "table", "team_of",
]
