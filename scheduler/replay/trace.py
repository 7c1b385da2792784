"""Reading GPU cluster traces for replay.

A trace is a CSV file with (at least) the columns ``job_id``,
``submission_time`` (seconds), ``duration`` (seconds of running time) and
``num_gpu``, as in the ITP traces of the ElasticFlow paper; other columns are
ignored. Rows must be sorted by submission time only loosely: jobs are
replayed in (submission_time, file order).

Tenants are not in the data, so they are derived from the job id, the same
way for every policy compared:

    team = "team-%d" % (int(job_id.replace("-", "")[:8], 16) % n_teams)

i.e. the first 8 hex digits of the id (dashes removed) modulo the number of
teams (4 by default). Ids that are not hexadecimal fall back to the CRC-32
of the id, so any id works and the rule stays deterministic.

Nodes have 8 GPUs. A job of up to 8 GPUs is one worker; a larger one is a
gang: for a multiple of 8 that is ``num_gpu / 8`` workers of 8 GPUs (the
traces only have 16, 32 and 64); otherwise the fewest equal workers of at
most 8 GPUs each (12 GPUs → 2 workers of 6).
"""

from __future__ import annotations

import csv
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

GPUS_PER_NODE = 8
N_TEAMS = 4
COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
TARGET_LOAD = 0.8      # the benchmark's offered load when the capacity is derived


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a trace: when it arrived, how long it runs, how many GPUs, whose it is."""

    id: str
    submit: float          # seconds
    duration: float        # seconds of running time
    gpus: int              # total GPUs
    workers: int           # gang size (1 = a single worker)
    team: str
    line: int = 0          # line in the file (1 = header), for messages

    @property
    def gpus_per_worker(self) -> int:
        return self.gpus // self.workers


def team_of(job_id: str, n_teams: int = N_TEAMS) -> str:
    """The tenant of a job: the first 8 hex digits of its id (dashes removed) modulo ``n_teams``."""
    if n_teams < 1:
        raise ValueError(f"the number of teams must be at least 1, not {n_teams}")
    digits = job_id.replace("-", "")[:8]
    try:
        h = int(digits, 16)
    except ValueError:
        h = zlib.crc32(job_id.encode())
    return f"team-{h % n_teams}"


def split_gang(gpus: int, per_node: int = GPUS_PER_NODE) -> int:
    """How many equal workers of at most ``per_node`` GPUs a job of ``gpus`` GPUs becomes."""
    if gpus <= per_node:
        return 1
    workers = math.ceil(gpus / per_node)
    while gpus % workers:
        workers += 1
    return workers


def load(path: str | Path, n_teams: int = N_TEAMS, limit: int | None = None) -> list[Job]:
    """Read a trace file into jobs sorted by submission time (stable for ties).

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` (naming
    the file and line) for a missing column or a malformed row. ``limit``
    keeps only the first that many jobs of the file.
    """
    path = Path(path)
    if n_teams < 1:
        raise ValueError(f"the number of teams must be at least 1, not {n_teams}")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path.name}: the file is empty (expected a header with {', '.join(COLUMNS)})")
        header = [h.strip() for h in header]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path.name}:1: missing column(s) {', '.join(missing)} "
                             f"(a trace needs {', '.join(COLUMNS)})")
        idx = {c: header.index(c) for c in COLUMNS}
        jobs: list[Job] = []
        seen: set[str] = set()
        for row in reader:
            lineno = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if limit is not None and len(jobs) >= limit:
                break
            jobs.append(_job(row, idx, lineno, path.name, n_teams, seen))
    jobs.sort(key=lambda j: j.submit)
    return jobs


def _job(row: list[str], idx: dict[str, int], lineno: int, name: str, n_teams: int, seen: set) -> Job:
    where = f"{name}:{lineno}"
    if len(row) <= max(idx.values()):
        raise ValueError(f"{where}: expected at least {max(idx.values()) + 1} fields, found {len(row)}")
    job_id = row[idx["job_id"]].strip()
    if not job_id:
        raise ValueError(f"{where}: empty job_id")
    if job_id in seen:
        raise ValueError(f"{where}: job_id {job_id} appears twice")
    seen.add(job_id)

    def number(col: str) -> float:
        text = row[idx[col]].strip()
        try:
            v = float(text)
        except ValueError:
            raise ValueError(f"{where}: {col} must be a number of seconds, not {text!r}") from None
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}: {col} must be a finite number ≥ 0, not {text!r}")
        return v

    submit = number("submission_time")
    duration = number("duration")
    if duration <= 0:
        raise ValueError(f"{where}: duration must be positive, not {row[idx['duration']].strip()!r}")
    text = row[idx["num_gpu"]].strip()
    try:
        gpus = int(text)
    except ValueError:
        raise ValueError(f"{where}: num_gpu must be a whole number, not {text!r}") from None
    if gpus < 1:
        raise ValueError(f"{where}: num_gpu must be at least 1, not {gpus}")
    return Job(job_id, submit, duration, gpus, split_gang(gpus), team_of(job_id, n_teams), lineno)


def mean_gpus_busy(jobs: list[Job]) -> float:
    """GPU-seconds of the trace over its span (first to last submission), as in the traces README."""
    if not jobs:
        return 0.0
    first = min(j.submit for j in jobs)
    span = max(j.submit for j in jobs) - first
    if span <= 0:     # one instant: use the time until the last job would end
        span = max(j.submit + j.duration for j in jobs) - first
    return sum(j.gpus * j.duration for j in jobs) / span


def default_capacity(jobs: list[Job], load: float = TARGET_LOAD) -> int:
    """8 × ceil(mean GPUs busy / 0.8 / 8), never less than the largest job (traces README rule)."""
    if not jobs:
        return GPUS_PER_NODE
    nodes = math.ceil(mean_gpus_busy(jobs) / load / GPUS_PER_NODE)
    largest = max(j.gpus for j in jobs)
    return max(GPUS_PER_NODE * max(nodes, 1), GPUS_PER_NODE * math.ceil(largest / GPUS_PER_NODE))
