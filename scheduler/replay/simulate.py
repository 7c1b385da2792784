"""Trace replay: the real ``Scheduler`` on a virtual clock.

``simulate(jobs, capacity_gpus, policy)`` builds ``capacity_gpus / 8`` nodes of
8 generic GPUs and drives the same ``Scheduler`` facade the live service uses
(with an in-memory store that drops events) through a discrete-event loop:

* at each distinct event time, completions first (``mark_finished``), then
  arrivals (``submit``), then one ``cycle(now)``; every admitted job is
  reported running at once (``mark_running``) and its completion is scheduled;
* a preempted job is requeued at once by the engine (``release_on_preempt``)
  and resumes from its last checkpoint; what a preemption costs (restart time,
  work since the checkpoint) is ``restart`` (``costs.Restart``; free unless
  given), and its pending completion is invalidated; the jobs' class declares
  the same checkpoints (``checkpoint_every``, ``startup``), as an admin would;
* when the policy preempts, the loop also wakes up when a running job passes
  its class's ``preempt_after`` or ``swap_after`` (the live service cycles every few seconds;
  the replay only at instants where a decision can change), when a swap waits for
  its victim's next checkpoint (``CycleResult.wake_at``), when a running
  job passes a threshold of the ``las`` order, and after a
  cycle that preempted it cycles once more at the same instant so that
  requeued victims may take what the preemptor left free.

Policies are engine configurations, not separate code paths (see ``POLICIES``).
"""

from __future__ import annotations

import heapq
import time as _time
from dataclasses import dataclass, field

from .. import policies as service_orders
from ..core import Scheduler
from ..engine import EngineConfig
from ..model import ADMITTED
from ..store import MemoryStore
from . import metrics
from .costs import FREE, LIMIT_MODES, OVERESTIMATE, Restart, declared_limit
from .trace import GPUS_PER_NODE, N_TEAMS, Job


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    config: EngineConfig
    team_queues: bool       # True: an "org" queue with one guaranteed sub-queue per team
    limits: str = "none"    # run-time limits jobs declare unless the caller says (costs.LIMIT_MODES)


def _cfg(**kw) -> EngineConfig:
    return EngineConfig(release_on_preempt=True, **kw)


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("fifo", "one queue, strict first-in first-out, no backfill, no preemption",
           _cfg(backfill="none", preemption=False, order="fifo"), False),
    Policy("fifo-skip", "one queue in arrival order; anything that fits starts (no reservation)",
           _cfg(backfill="skip", preemption=False, order="fifo"), False),
    Policy("sjf", "one queue, shortest declared time limit first (oracle durations); anything that "
           "fits starts", _cfg(backfill="skip", preemption=False, order="sjf"), False, "oracle"),
    Policy("srtf", "one queue, shortest remaining declared time first (oracle durations), preemptive",
           _cfg(backfill="skip", preemption=True, order="srtf"), False, "oracle"),
    Policy("las", "Tiresias-L: one queue, discretised 2D-LAS (least attained GPU-time, queues split at "
           "3,250 / 7,200 / 18,000 GPU-seconds), preemptive, no durations",
           _cfg(backfill="skip", preemption=True, order="las"), False, "none"),
    Policy("default", "ComputeHub: team queues with equal guarantees and borrowing; class rank, queues "
           "below their guarantee first, fair share (1-day half-life) in steps, then Maui's expansion "
           "factor (wait + declared limit) / declared limit; EASY backfill on declared limits "
           "(estimates); reclaim by preemption; preempts work of the same team and rank that declares "
           "8× more time left, once it has just saved a checkpoint; moves up to 4 running jobs to clear a node for owed work (per node, for a gang)",
           _cfg(backfill="reserve", preemption=True, order="priority"), True, "estimate"),
    Policy("default-age", "ComputeHub's default until 2026-12: as default, but fair share with a "
           "7-day half-life and then age (no expansion factor), no preemption for shorter work, "
           "no consolidation",
           _cfg(backfill="reserve", preemption=True, order="priority", expansion_order=False,
                half_life=7 * 86400.0, preempt_for_shorter=0.0, consolidation_moves=0), True, "estimate"),
)}
# 'policy': each policy's own (oracle for sjf/srtf, estimates for default, none otherwise).
DECLARED_LIMITS = ("policy",) + LIMIT_MODES


@dataclass
class JobRecord:
    """What happened to one job in a replay (times in seconds of the trace's clock)."""

    job: Job
    first_admit: float | None = None
    finish: float | None = None
    preemptions: int = 0
    busy_gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0    # held but wasted: restarts and work since the last checkpoint

    @property
    def jct(self) -> float:
        return self.finish - self.job.submit

    @property
    def queueing(self) -> float:
        return self.first_admit - self.job.submit


@dataclass
class Outcome:
    policy: str
    capacity_gpus: int
    n_teams: int
    declared_limits: str
    records: list[JobRecord] = field(default_factory=list)
    cycles: int = 0
    preemptions: int = 0
    wall_seconds: float = 0.0
    cycle_seconds: float = 0.0   # engine time inside cycle()
    restart: str = FREE.describe()


class StuckError(RuntimeError):
    """Work is pending, nothing runs and nothing will arrive: the engine never admits it."""


def node_sizes(capacity_gpus: int) -> list[int]:
    """GPUs per node: as many 8-GPU nodes as fit, plus one smaller node for a remainder."""
    if capacity_gpus < 1:
        raise ValueError(f"capacity must be at least 1 GPU, not {capacity_gpus}")
    full, rest = divmod(capacity_gpus, GPUS_PER_NODE)
    return [GPUS_PER_NODE] * full + ([rest] if rest else [])


def check_fits(jobs: list[Job], capacity_gpus: int) -> None:
    """Raise ``ValueError`` naming the first job an empty cluster of this size could never hold."""
    sizes = node_sizes(capacity_gpus)
    for j in jobs:
        g = j.gpus_per_worker
        if sum(s // g for s in sizes) < j.workers:
            raise ValueError(
                f"job {j.id} (line {j.line}) needs {j.gpus} GPUs"
                + (f" as {j.workers} workers × {g}" if j.workers > 1 else "")
                + f"; a cluster of {capacity_gpus} GPUs can never hold it "
                  f"(use at least {GPUS_PER_NODE * j.workers if j.workers > 1 else j.gpus} GPUs)")


def build(capacity_gpus: int, policy: str = "default", n_teams: int = N_TEAMS,
          clock=None, engine: dict | None = None) -> Scheduler:
    """A ``Scheduler`` with the nodes and queues of a replay of ``policy``; ``engine`` overrides
    settings (``EngineConfig`` traits) of the ComputeHub policies (those with team queues)."""
    p = POLICIES.get(policy)
    if p is None:
        raise ValueError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
    if n_teams < 1:
        raise ValueError(f"the number of teams must be at least 1, not {n_teams}")
    sched = Scheduler(MemoryStore(keep_events=False), p.config.copy(**(engine if p.team_queues and engine else {})),
                      clock=clock or (lambda: 0.0))
    for i, gpus in enumerate(node_sizes(capacity_gpus)):
        sched.put_node({"name": f"node-{i:04d}", "gpus": gpus, "cpu": 256, "memory": "2Ti"}, now=0.0)
    if p.team_queues:
        sched.put_queue({"name": "org"}, now=0.0)
        share = capacity_gpus // n_teams
        for t in range(n_teams):
            sched.put_queue({"name": f"team-{t}", "parent": "org", "guaranteed": {"gpu": share}}, now=0.0)
    else:
        sched.put_queue({"name": "all", "guaranteed": {"gpu": capacity_gpus}}, now=0.0)
    return sched


def run(jobs: list[Job], capacity_gpus: int, policy: str = "default", *, n_teams: int = N_TEAMS,
        declared_limits: str = "oracle", after_cycle=None, restart: Restart = FREE,
        overestimate: float = OVERESTIMATE, engine: dict | None = None) -> Outcome:
    """Replay ``jobs`` and return what happened to each (see ``simulate`` for the summary).

    ``declared_limits``: what jobs declare as run-time limit (``costs``), 'policy' = the
    policy's own choice. ``restart``: what a preemption costs (``costs.Restart``).
    ``after_cycle(scheduler, now, cycle_result, workload_to_job)`` is called after
    every cycle (the demo uses it to ask pending work to explain itself). ``engine``: settings
    of the ComputeHub policies to override (``build``), e.g. ``{"swap_loss": math.inf}``.
    """
    if declared_limits not in DECLARED_LIMITS:
        raise ValueError(f"declared_limits must be one of {', '.join(DECLARED_LIMITS)}, not {declared_limits!r}")
    if not overestimate >= 1:
        raise ValueError(f"the over-estimate factor must be at least 1, not {overestimate}")
    if policy in POLICIES and declared_limits == "policy":
        declared_limits = POLICIES[policy].limits
    check_fits(jobs, capacity_gpus)
    wall0 = _time.perf_counter()
    clock = [0.0]
    sched = build(capacity_gpus, policy, n_teams, clock=lambda: clock[0], engine=engine)
    if restart.checkpoint_s > 0:
        # The jobs checkpoint as the cost model says; an admin declares that on their class.
        jobs_class = sched.state.classes["training"].to_dict()
        jobs_class.update(checkpoint_every=restart.checkpoint_s, startup=restart.restart_s)
        sched.put_class(jobs_class, now=0.0)
    queue_of = (lambda j: j.team) if POLICIES[policy].team_queues else (lambda j: "all")
    wake_after: list[float] = []      # after a start, when running work may become a victim
    if sched.config.preemption:
        wake_after = sorted({t for c in sched.state.classes.values()
                             for t in (c.preempt_after, c.swap_after or 0.0) if t > 0})
    las = sched.config.order == "las"
    thresholds = sched.config.las_thresholds

    records = [JobRecord(j) for j in jobs]
    saved = [0.0] * len(jobs)          # progress (seconds) kept by checkpoints
    overhead = [0.0] * len(jobs)       # restart time of the current run
    version = [0] * len(jobs)
    run_start: dict[int, float] = {}
    wakes: set[float] = set()
    of: dict[str, int] = {}            # workload id -> job index
    wid: list[str | None] = [None] * len(jobs)
    # (time, kind, tie, job index, version); kinds: 0 completion, 1 arrival, 2 wake-up
    heap: list[tuple[float, int, int, int, int]] = [(j.submit, 1, i, i, 0) for i, j in enumerate(jobs)]
    heapq.heapify(heap)
    tie = len(jobs)
    out = Outcome(policy, capacity_gpus, n_teams, declared_limits, records, restart=restart.describe())
    unfinished = len(jobs)

    def do_cycle(now: float) -> bool:
        nonlocal tie
        res = sched.cycle(now)
        out.cycles += 1
        out.cycle_seconds += res.seconds
        for v, _by in res.preempted:
            i = of[v.id]
            start = run_start.pop(i, None)
            if start is None:
                continue
            progress = saved[i] + max(0.0, now - start - overhead[i])
            kept = max(saved[i], restart.saved(progress))
            records[i].lost_gpu_seconds += jobs[i].gpus * ((now - start) - (kept - saved[i]))
            saved[i] = kept
            overhead[i] = restart.restart_s
            records[i].busy_gpu_seconds += jobs[i].gpus * (now - start)
            records[i].preemptions += 1
            version[i] += 1
            out.preemptions += 1
        for w in res.admitted:
            i = of[w.id]
            if w.state != ADMITTED or i in run_start:
                continue
            sched.mark_running(w.id, now=now)
            run_start[i] = now
            if records[i].first_admit is None:
                records[i].first_admit = now
            heapq.heappush(heap, (now + overhead[i] + jobs[i].duration - saved[i], 0, tie, i, version[i]))
            tie += 1
            for after in wake_after:
                heapq.heappush(heap, (now + after, 2, tie, -1, 0))
                tie += 1
            when = service_orders.next_change(w, now, thresholds) if las else None
            if when is not None:
                heapq.heappush(heap, (when, 2, tie, -1, 0))
                tie += 1
        if res.wake_at is not None and res.wake_at > now and res.wake_at not in wakes:
            wakes.add(res.wake_at)        # a swap waits for its victim's checkpoint
            heapq.heappush(heap, (res.wake_at, 2, tie, -1, 0))
            tie += 1
        if after_cycle is not None:
            after_cycle(sched, now, res, of)
        return bool(res.preempted)

    while unfinished:
        if not heap:
            now = clock[0]
            before = len(run_start)
            do_cycle(now)
            if len(run_start) == before:
                stuck = sorted(sched.state.pending.values(), key=lambda w: w.seq)
                w = stuck[0] if stuck else None
                why = sched.explain(w.id, now=now).get("reason", "") if w else "nothing pending"
                raise StuckError(
                    f"{policy}: {unfinished} job(s) never finish: nothing runs, nothing arrives and "
                    f"the cycle at t={now:g} s admits nothing; first pending {w.id if w else '-'} "
                    f"({jobs[of[w.id]].id if w else '-'}): {why}")
            continue
        now = heap[0][0]
        clock[0] = now
        changed = False
        while heap and heap[0][0] == now:
            _, kind, _, i, ver = heapq.heappop(heap)
            if kind == 0:
                if ver != version[i]:
                    continue
                sched.mark_finished(wid[i], now=now)
                start = run_start.pop(i)
                records[i].busy_gpu_seconds += jobs[i].gpus * (now - start)
                records[i].lost_gpu_seconds += jobs[i].gpus * overhead[i]    # the last restart's time
                records[i].finish = now
                unfinished -= 1
                changed = True
            elif kind == 1:
                j = jobs[i]
                w = sched.submit({
                    "user": j.team, "queue": queue_of(j), "kind": "training",
                    "resources": {"gpu": j.gpus_per_worker}, "workers": j.workers,
                    "time_limit": declared_limit(j, declared_limits, overestimate),
                    "name": j.id[:128]}, now=now)
                of[w.id] = i
                wid[i] = w.id
                changed = True
        if not changed and not sched.state.pending:
            continue            # a wake-up with nothing waiting
        again = do_cycle(now)
        for _ in range(8):      # requeued victims may fit in what the preemptor left
            if not again or not sched.state.pending:
                break
            again = do_cycle(now)
    out.wall_seconds = _time.perf_counter() - wall0
    return out


def simulate(jobs: list[Job], capacity_gpus: int, policy: str = "default", *, n_teams: int = N_TEAMS,
             declared_limits: str = "oracle", after_cycle=None, restart: Restart = FREE,
             overestimate: float = OVERESTIMATE) -> dict:
    """Replay ``jobs`` on ``capacity_gpus`` GPUs under ``policy`` and return its metrics
    (see ``metrics.summarize`` for the keys)."""
    return metrics.summarize(run(jobs, capacity_gpus, policy, n_teams=n_teams,
                                 declared_limits=declared_limits, after_cycle=after_cycle,
                                 restart=restart, overestimate=overestimate))


__all__ = ["DECLARED_LIMITS", "JobRecord", "Outcome", "POLICIES", "Policy", "StuckError", "build",
           "check_fits", "node_sizes", "run", "simulate"]
