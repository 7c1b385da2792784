"""The engine's knobs, as traitlets configuration (``c.EngineConfig.backfill = ...``)."""

from __future__ import annotations

from traitlets import Bool, Enum, Float, Integer, TraitError, validate
from traitlets.config import Configurable


class EngineConfig(Configurable):
    """How the engine decides. The defaults are ComputeHub's policy; trace replay
    expresses FIFO and the classic policies as other settings of the same engine."""

    backfill = Enum(
        ["none", "skip", "reserve"], default_value="reserve", config=True,
        help="""What may start when the work at the head of the line cannot.
        'reserve' (EASY backfill): the first such workload reserves the capacity it will
        get when running work ends at its declared time limit; others start on the rest,
        or on the reserved capacity if their own declared time limit ends before then.
        'skip': anything that fits starts. 'none': strict order, nothing passes.""")
    preemption = Bool(
        True, config=True,
        help="Preempt lower-ranked or borrowed work (reclaim) to admit work that is entitled to it.")
    order = Enum(
        ["priority", "fifo", "sjf"], default_value="priority", config=True,
        help="""Order of pending work. 'priority': class rank, then fair share, then age.
        'fifo': submission order. 'sjf': shortest declared time limit first (replay studies).""")
    half_life = Float(
        7 * 86400.0, config=True,
        help="Half-life of past usage in fair share, in seconds (Slurm's PriorityDecayHalfLife).")
    reservations = Integer(
        1, config=True,
        help="How many blocked workloads (first in line) hold a backfill reservation at a time.")
    release_on_preempt = Bool(
        False, config=True,
        help="""True: a preempted workload's resources are free at once (trace replay).
        False: it keeps them until its launcher reports it stopped; whoever needs them waits.""")
    max_victims_tried = Integer(
        256, config=True,
        help="The most preemption candidates considered for one pending workload per cycle.")

    @validate("half_life")
    def _positive_half_life(self, proposal):
        if proposal["value"] <= 0:
            raise TraitError("half_life must be a positive number of seconds")
        return proposal["value"]

    def copy(self, **changes) -> "EngineConfig":
        values = {name: getattr(self, name) for name in self.trait_names(config=True)}
        values.update(changes)
        return EngineConfig(**values)
