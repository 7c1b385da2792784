"""The engine's knobs, as traitlets configuration (``c.EngineConfig.backfill = ...``)."""

from __future__ import annotations

from traitlets import Bool, Enum, Float, Integer, List, TraitError, validate
from traitlets.config import Configurable


class EngineConfig(Configurable):
    """How the engine decides. The defaults are ComputeHub's policy; trace replay
    expresses FIFO and the classic policies as other settings of the same engine."""

    backfill = Enum(
        ["none", "skip", "reserve"], default_value="reserve", config=True,
        help="""What may start when the work at the head of the line cannot.
        'reserve' (EASY backfill): the first such workload reserves the capacity it will
        get when running work ends at its declared time limit (of what is free now, only what
        it still lacks then is held); others start on the rest, or on the reserved capacity
        if their own declared time limit ends before then.
        Work larger than its queue's whole guarantee reserves nothing while other queues
        are guaranteed GPUs (it only ever runs on what they leave free) and consolidation
        is on, until it has waited long for its size (oversize_reservation_stretch); the
        first blocked workload its guarantee can hold reserves instead.
        'skip': anything that fits starts. 'none': strict order, nothing passes.""")
    oversize_reservation_stretch = Float(
        8.0, min=0.0, config=True,
        help="""With backfill='reserve': work larger than its queue's whole guarantee (which
        otherwise holds no reservation) holds one once its expansion factor (wait + declared
        limit) / declared limit reaches this, so that it cannot wait for good: a job declaring
        1 hour after 7 hours of waiting, one declaring a day after a week (work without a
        limit counts as assumed_limit). In trace replay 32-GPU jobs of an hour, of teams
        guaranteed 28 GPUs, otherwise waited up to 200 hours (bench/HISTORY.md). 0 = never.""")
    preemption = Bool(
        True, config=True,
        help="Preempt lower-ranked or borrowed work (reclaim) to admit work that is entitled to it.")
    order = Enum(
        ["priority", "fifo", "sjf", "srtf", "las"], default_value="priority", config=True,
        help="""Order of pending work. 'priority': class rank, then queues that use less
        than their guarantee before the others, then fair share (in steps of fair_share_band),
        then the expansion factor (expansion_order), then age.
        'fifo': submission order. 'sjf': shortest declared time limit first (replay studies).
        'srtf': class rank, then shortest declared limit minus time already run; preemptive.
        'las': class rank, then discretised least attained GPU service (Tiresias-L, queues
        split at las_thresholds), then age; preemptive. See scheduler/policies.py.""")
    las_thresholds = List(
        Float(), default_value=[3250.0, 7200.0, 18000.0], config=True,
        help="""Attained-service thresholds in GPU-seconds that split the 'las' order into
        queues: work below the first goes first, and so on (n thresholds = n + 1 queues).""")
    expansion_order = Bool(
        True, config=True,
        help="""'priority' order only: among work of equal class rank and fair-share step
        (fair_share_band), the higher expansion factor (wait + declared limit) / declared limit
        goes first (Maui's XFactor): short declared work first, and waiting raises any work.
        False: age (submission order) instead.""")
    fair_share_band = Float(
        0.25, config=True,
        help="""Fair shares (decayed usage over weight, in units of cluster capacity × half-life)
        that fall in the same step of this size count as equal, so small differences in past
        use do not override the expansion factor. A team that used its quarter of the cluster
        all along has about 0.36. 0 = every difference counts.""")
    assumed_limit = Float(
        86400.0, config=True,
        help="With expansion_order: the run-time limit, in seconds, assumed for work that declares none.")
    preempt_for_shorter = Float(
        8.0, config=True,
        help="""'priority' order only: pending work that cannot start may preempt running work of
        its own queue and class rank (preemptible, run at least its class's preempt_after)
        whose declared time left is more than this many times its own (time left = declared
        run-time limit, or assumed_limit, minus the time already run). The queue's usage does
        not change, so no guarantee or other team is affected; short work stops waiting behind
        long work of its own team (shortest-remaining-time, as Tiresias and SRTF, with a margin
        against churn). 0 = off; otherwise greater than 1.""")
    swap_loss = Float(
        300.0, min=0.0, config=True,
        help="""With preempt_for_shorter, for work that says how it checkpoints (its own or its
        priority class's checkpoint_every, the class's startup): the most seconds of progress
        since its last checkpoint a swap for shorter work may throw away. A swap is an
        improvement, not anyone's due, so it waits until a victim has just saved; reclaim for a
        guarantee and moves do not wait. In trace replay it cut the GPU-hours lost to
        preemption by up to half (bench/HISTORY.md). Work that declares no checkpoints is
        swapped whenever it qualifies.""")
    preemption_delay = Float(
        0.0, min=0.0, config=True,
        help="""Seconds pending work that its team is not owed (beyond its queue's guarantee, or a
        swap for shorter work inside the team) waits, counted from its submission, before it
        may preempt or move running work: GPUs that free up by themselves meanwhile spare a
        preemption, like YuniKorn's preemption.delay. Work within its queue's guarantee
        reclaims at once, as always: delayed, it found the borrowers it could have taken gone
        and fresh ones protected by preempt_after, and waited past the guarantee's promise
        (bench/HISTORY.md, with what 300 s changed in trace replay). 0 = at once.""")
    half_life = Float(
        86400.0, config=True,
        help="""Half-life of past usage in fair share, in seconds (Slurm's PriorityDecayHalfLife,
        whose default is 7 days). One day: guarantees already protect each team's share, and
        in trace replay a week's memory held a team back long after a burst (bench/HISTORY.md).""")
    reservations = Integer(
        1, config=True,
        help="How many blocked workloads (first in line) hold a backfill reservation at a time.")
    release_on_preempt = Bool(
        False, config=True,
        help="""True: a preempted workload's resources are free at once (trace replay).
        False: it keeps them until its launcher reports it stopped; whoever needs them waits.""")
    consolidation_moves = Integer(
        4, min=0, config=True,
        help="""'priority' order only: the most running workloads moved to other nodes to make
        room for one workload its team is owed (one node, within its queue's guarantee) when
        reclaim alone cannot: the free and borrowed GPUs are scattered over nodes that also
        run work of teams at or below their guarantee. A move preempts preemptible one-worker
        work of a class that requeues, that has run its class's preempt_after and fits
        elsewhere now (or once borrowed work there is reclaimed too); it restarts from its
        checkpoint and its queue's usage does not change. For a gang (multi-worker work its
        quotas let start) that lacks whole nodes, the most moved off each node it clears
        (with the borrowed work there reclaimed too when the gang is owed).
        0 = never move work.""")
    max_victims_tried = Integer(
        256, config=True,
        help="The most preemption candidates considered for one pending workload per cycle.")

    # Each refusal names the setting, the value and what it takes (a person reads it at start).
    _POSITIVE = {"half_life": "seconds", "assumed_limit": "seconds"}
    _AT_LEAST = {"fair_share_band": (0, "a fair-share step; 0 = every difference counts"),
                 "reservations": (0, "workloads; 0 = none reserves"),
                 "max_victims_tried": (1, "preemption candidates per workload")}

    @validate(*_POSITIVE)
    def _positive(self, proposal):
        name, value = proposal.trait.name, proposal["value"]
        if not 0 < value < float("inf"):
            raise TraitError(f"EngineConfig.{name} must be a positive number of {self._POSITIVE[name]}, "
                             f"not {value!r}")
        return value

    @validate(*_AT_LEAST)
    def _at_least(self, proposal):
        name, value = proposal.trait.name, proposal["value"]
        low, what = self._AT_LEAST[name]
        if not low <= value < float("inf"):
            raise TraitError(f"EngineConfig.{name} must be at least {low} ({what}), not {value!r}")
        return value

    @validate("preempt_for_shorter")
    def _factor_or_off(self, proposal):
        if not (proposal["value"] == 0 or 1 < proposal["value"] < float("inf")):
            raise TraitError("EngineConfig.preempt_for_shorter must be 0 (off) or a factor greater than 1, "
                             f"not {proposal['value']!r}")
        return proposal["value"]

    @validate("las_thresholds")
    def _sorted_thresholds(self, proposal):
        value = [float(x) for x in proposal["value"]]
        if any(x <= 0 for x in value) or value != sorted(set(value)):
            raise TraitError("EngineConfig.las_thresholds must be increasing positive GPU-seconds, "
                             f"not {proposal['value']!r}")
        return value

    def copy(self, **changes) -> "EngineConfig":
        values = {name: getattr(self, name) for name in self.trait_names(config=True)}
        values.update(changes)
        return EngineConfig(**values)
