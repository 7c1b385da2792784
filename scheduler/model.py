"""The scheduler's nouns: priority classes, queues, nodes, workloads, events.

These are plain data. Validation of user input lives in ``validation``; the
arithmetic of quotas in ``quota``; placement in ``placement``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .resources import parse_cpu, parse_vector, render

# Workload kinds and the priority class each gets unless it asks for another.
KINDS = ("notebook", "training", "inference", "batch")
DEFAULT_CLASS_FOR_KIND = {
    "notebook": "interactive",
    "training": "training",
    "inference": "inference",
    "batch": "preemptible",
}

# Workload states.
# Workload metadata keys that ComputeHub itself writes (the launcher's status, service run
# in earlier runs, who preempted it, whom it was moved for, when it was last requeued): a
# submission may not set them.
QUEUED_AT = "queued_at"
START_TIMEOUTS = "start_timeouts"        # how often it was given back unstarted (start_deadline.py)
STOPPING_SINCE = "stopping_since"        # when it was told to stop (preempted), while it stops
STOP_OVERDUE = "stop_overdue"            # when it was found not stopped in time (stop_deadline.py)
STOP_REASON = "stop_reason"              # why it is being cancelled or reclaimed, while it is stopped
HOLD = "hold"                            # who holds it back, when and why (holds.py), while held
MAIL = "mail"                            # the mail types its owner asked for (mail_types.py)
TOP = "top"                              # when its owner put it first among their own (tops.py)
SCHEDULER_METADATA = ("status", "ran_s", "preempted_by", "moved_for", QUEUED_AT, START_TIMEOUTS, STOPPING_SINCE,
                      STOP_OVERDUE, STOP_REASON, HOLD, MAIL, TOP)

AWAITING_APPROVAL = "awaiting_approval"  # accepted, above its queue's approval threshold
PENDING = "pending"          # accepted, waiting for admission
HELD = "held"                # accepted, waits for the work it runs after (``after``) or held back (holds.py)
ADMITTED = "admitted"        # placement assigned, resources held, launcher starting it
RUNNING = "running"          # the launcher reports it running
PREEMPTING = "preempting"    # chosen as a victim; holds resources until it has stopped
CANCELLING = "cancelling"    # cancelled while a launcher runs it; holds resources until it has stopped
RECLAIMING = "reclaiming"    # idle, its resources taken back; holds them until it has stopped
FINISHED = "finished"
FAILED = "failed"
CANCELLED = "cancelled"
PREEMPTED = "preempted"      # preempted and not requeued (class says so)
RECLAIMED = "reclaimed"      # idle, its resources taken back
REJECTED = "rejected"        # an admin refused the approval it needed
HOLDING = (ADMITTED, RUNNING, PREEMPTING, CANCELLING, RECLAIMING)   # states that hold an allocation
STOPPING = (PREEMPTING, CANCELLING, RECLAIMING)   # told to stop: what it holds is about to be free
TERMINAL = (FINISHED, FAILED, CANCELLED, PREEMPTED, RECLAIMED, REJECTED)
LIVE = (AWAITING_APPROVAL, HELD, PENDING, *HOLDING)          # every state but the ended ones
ENDS_AS = {CANCELLING: CANCELLED, RECLAIMING: RECLAIMED}   # how work told to stop for good ends once stopped


def leaving(w) -> bool:
    """Work told to stop (preempted, cancelled while a launcher runs it, reclaimed) that is expected to
    stop soon: a cycle may place work on what it holds (only nominated until it has stopped).
    Work past the service's stop deadline is not: what it holds is held until a launcher
    reports it stopped (stop_deadline.py)."""
    return w.state in STOPPING and STOP_OVERDUE not in w.metadata


def run_label(admitted_at: float | None) -> str:
    """The run a workload is on, as launchers (the objects they make) and report tokens name
    it: its admission time, new each time it is admitted again ("" before any)."""
    return f"{float(admitted_at):.6f}" if admitted_at is not None else ""


@dataclass(slots=True)
class PriorityClass:
    """How important a kind of work is and what it may do.

    ``rank``: higher goes first. ``preemptible``: may be stopped for more
    important work or to give a queue back its guarantee; work that is not
    preemptible only runs inside its queue's guaranteed quota.
    ``may_borrow``: may use idle quota of sibling queues. ``preempt_after``:
    seconds a workload runs before it may be preempted. ``swap_after``: seconds
    it runs (since it last started) before shorter work of its own queue and
    class may swap it out (``preempt_for_shorter``); None = ``preempt_after``.
    Set to the work's checkpoint interval, a swapped job always keeps some
    progress. ``requeue``: a preempted workload goes back to the queue (with
    its original age) instead of ending. ``checkpoint_every``: seconds of
    progress between the checkpoints the class's work saves (None = not known);
    ``startup``: seconds each start spends before the work makes progress
    (loading its checkpoint). With both, the engine knows how much work a
    preemption would throw away (``preemption.since_checkpoint``): swaps wait
    until a victim has just saved (``EngineConfig.swap_loss``). ``saves_on_stop``:
    the class's work saves a checkpoint when told to stop (a SIGTERM handler), so a
    preemption loses only its restart; a job seen doing so is marked by itself
    (``Workload.saves_on_stop``), this declares it for all of the class's work.
    ``groups``: the JupyterHub groups whose members may submit with this class
    (the service checks; spawners and admins always may); empty = everyone.
    """

    name: str
    rank: int
    preemptible: bool = True
    may_borrow: bool = True
    preempt_after: float = 0.0
    requeue: bool = True
    description: str = ""
    swap_after: float | None = None
    checkpoint_every: float | None = None
    startup: float = 0.0
    saves_on_stop: bool = False
    groups: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PriorityClass":
        return cls(**{k: d[k] for k in d if k in cls.__dataclass_fields__})


def default_classes() -> list[PriorityClass]:
    return [
        PriorityClass("interactive", 400, preemptible=False, may_borrow=False,
                      requeue=False, description="notebooks: never preempted, inside guarantee"),
        PriorityClass("inference", 300, preemptible=False, may_borrow=False,
                      requeue=False, description="services: never preempted, inside guarantee"),
        PriorityClass("training", 200, preemptible=True, may_borrow=True, preempt_after=600.0,
                      description="training jobs: may borrow, preemptible after 10 minutes"),
        PriorityClass("preemptible", 100, preemptible=True, may_borrow=True,
                      description="batch and backfill: borrows freely, preempted first"),
    ]


@dataclass(slots=True)
class IdlePolicy:
    """When an idle notebook is warned and when its resources are taken back (seconds)."""

    warn_after: float | None = None
    release_after: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class QueueSpec:
    """One queue of the tree (organisation → team → optional sub-queue).

    Per-resource ``guaranteed`` is never lent away when the queue needs it;
    ``limit`` is a hard cap (absent resource = no cap); ``weight`` is the
    queue's share of spare capacity in fair share; ``may_borrow`` lets it use
    idle quota of others; ``lending_limit`` caps how much of its idle guarantee
    others may borrow (absent resource = all of it). ``user_limit`` applies to
    every user in the queue unless ``user_limits`` names that user.
    A workload asking for more than ``approval_above`` waits for an admin's
    approval before it joins the line. ``groups`` names the JupyterHub groups
    whose members may submit to the queue (and whose team leads see it); a queue
    naming none has its nearest ancestor's (``QueueTree.access``).
    """

    name: str
    parent: str | None = None
    guaranteed: dict[str, int] = field(default_factory=dict)
    limit: dict[str, int] = field(default_factory=dict)
    weight: float = 1.0
    may_borrow: bool = True
    lending_limit: dict[str, int] | None = None
    user_limit: dict[str, int] = field(default_factory=dict)
    user_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    approval_above: dict[str, int] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    description: str = ""

    def limit_for_user(self, user: str) -> dict[str, int]:
        return self.user_limits.get(user, self.user_limit)

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("guaranteed", "limit", "lending_limit", "user_limit", "approval_above"):
            d[k] = render(d[k])
        d["user_limits"] = {u: render(v) for u, v in self.user_limits.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "QueueSpec":
        """From stored (already validated) form."""
        d = {k: d[k] for k in d if k in cls.__dataclass_fields__}
        d["guaranteed"] = parse_vector(d.get("guaranteed"))
        for k in ("limit", "user_limit", "approval_above"):
            d[k] = parse_vector(d.get(k), keep_zero=True)
        d["groups"] = list(d.get("groups") or [])
        if d.get("lending_limit") is not None:
            d["lending_limit"] = parse_vector(d["lending_limit"], keep_zero=True)
        d["user_limits"] = {u: parse_vector(v, keep_zero=True) for u, v in (d.get("user_limits") or {}).items()}
        if isinstance(d.get("idle"), dict):
            d["idle"] = IdlePolicy(**d["idle"])
        return cls(**d)


@dataclass(slots=True)
class NodeSpec:
    """A machine: its GPUs (all of one model), CPU, memory, labels and health.

    A node that is not ``healthy`` or is ``draining`` takes no new work; what
    runs there keeps running.
    """

    name: str
    gpus: int = 0
    gpu_model: str | None = None
    cpu: int = 0
    memory: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    healthy: bool = True
    draining: bool = False
    gpu_memory: int = 0

    @property
    def schedulable(self) -> bool:
        return self.healthy and not self.draining

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cpu"] = f"{self.cpu}m"
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "NodeSpec":
        d = {k: d[k] for k in d if k in cls.__dataclass_fields__}
        d["cpu"] = parse_cpu(d.get("cpu", 0))
        return cls(**d)


@dataclass(slots=True)
class Assignment:
    """Where one worker of a workload runs: a node and concrete GPU indices."""

    node: str
    gpus: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {"node": self.node, "gpus": list(self.gpus)}

    @classmethod
    def from_dict(cls, d: dict) -> "Assignment":
        return cls(d["node"], tuple(d.get("gpus", ())))


@dataclass(slots=True, eq=False)
class Workload:
    """Something that needs compute: a notebook, a training job, a service, batch work.

    ``request`` is per worker; ``workers`` > 1 makes a gang that is admitted
    all-or-nothing. ``time_limit`` (seconds) is the declared run-time limit
    that backfill and ETAs use; None means unknown. ``checkpoint_every``
    (seconds of progress between its checkpoints) overrides its priority
    class's, None = the class's. ``checkpointed_at``: when the running work
    last reported a saved checkpoint (``Scheduler.report_checkpoint``); a
    report from its current run says exactly what a preemption would lose.
    ``checkpoint_seen_every``: the interval between its last two reports in
    one run (seconds), which beats any declared interval. ``saves_on_stop``:
    it was seen saving a checkpoint when told to stop (SIGTERM), so a
    preemption loses only its restart. ``after``: the workloads it runs after,
    each ``"<id>:<condition>"`` (``dependencies``); until they have ended as asked
    it is ``held``. ``eligible_at``: when it joined the line, if later than its
    submission (its dependencies let it go then); ordering counts its wait from
    then, as Slurm's age factor counts from a job's eligible time. ``array``: its place in a job
    array (``arrays``), None for work submitted alone.
    """

    id: str
    seq: int
    user: str
    queue: str
    kind: str
    priority: str
    request: dict[str, int]
    workers: int = 1
    gpu_model: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    time_limit: float | None = None
    checkpoint_every: float | None = None
    name: str = ""
    submitted_at: float = 0.0
    after: list[str] = field(default_factory=list)
    eligible_at: float | None = None
    array: dict[str, Any] | None = None
    state: str = PENDING
    placement: list[Assignment] = field(default_factory=list)
    admitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    preemptions: int = 0
    reason: str = ""
    exit_code: int | None = None
    idle_warned_at: float | None = None
    checkpointed_at: float | None = None
    checkpoint_seen_every: float | None = None
    saves_on_stop: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> dict[str, int]:
        """The whole request: per-worker request times workers."""
        if self.workers == 1:
            return self.request
        return {k: v * self.workers for k, v in self.request.items()}

    @property
    def gpus(self) -> int:
        return self.request.get("gpu", 0) * self.workers

    @property
    def waiting_since(self) -> float:
        """When it last entered the queue: its submission, or its last requeue (after a preemption
        or a lost node). How long it has waited *now*; ordering still ages it from submission."""
        return float(self.metadata.get(QUEUED_AT, self.submitted_at))

    @property
    def eligible_since(self) -> float:
        """When it could first run: its submission, or when the work it runs after let it."""
        return self.submitted_at if self.eligible_at is None else self.eligible_at

    @property
    def flavor(self) -> str:
        """The GPU flavor it asked for ('any' when no model; ``Scheduler`` books its nodes' model)."""
        return self.gpu_model or ("any" if self.request.get("gpu") else "none")

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["request"] = render(self.request)
        d["node_selector"] = dict(self.node_selector)
        d["metadata"] = dict(self.metadata)
        d["placement"] = [a.to_dict() for a in self.placement]
        d["after"] = list(self.after)
        d["array"] = dict(self.array) if self.array else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Workload":
        d = {k: d[k] for k in d if k in cls.__dataclass_fields__}
        d["request"] = parse_vector(d.get("request"))
        d["placement"] = [Assignment.from_dict(a) for a in d.get("placement") or []]
        return cls(**d)


@dataclass(slots=True)
class Event:
    """One transition of a workload (or an admin/scheduler action), with time and reason."""

    time: float
    kind: str
    workload_id: str | None = None
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    id: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class Allocation:
    """A ledger interval: a workload held ``gpus`` GPUs of ``flavor`` from start to end
    (``array_id``: the job array it is a task of, if any)."""

    workload_id: str
    user: str
    queue: str
    flavor: str
    gpus: int
    start: float
    end: float | None = None
    array_id: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)
