"""Checks at the edge: every spec is refused with a clear message before it touches state."""

from __future__ import annotations

import math
import re

from . import dependencies, mail_types
from .errors import NotFound, ValidationError
from .model import DEFAULT_CLASS_FOR_KIND, KINDS, SCHEDULER_METADATA, IdlePolicy, NodeSpec, PriorityClass, QueueSpec
from .resources import (GPU, flavor_key, fmt_amount, is_flavor, label, parse_count, parse_cpu,
                        parse_memory, parse_vector)

# \Z, not $: "$" also matches before a trailing newline ("gpu-a\n" would pass).
MODEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}\Z")
MAX_WORKLOAD_NAME = 128
# A workload's name is free text shown to others (an admin's `computehub queue --all`, the pages):
# no control characters (terminal escapes, newlines; C0, DEL, C1), line/paragraph separators or
# bidirectional overrides that would make it show as something else.
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MAX_WORKERS = 1024
MAX_TIME_LIMIT = 366 * 86400.0
MAX_RANK = 1_000_000
MAX_DESCRIPTION = 2000


def check_name(what: str, value) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise ValidationError(
            f"{what} must be 1-63 letters, digits, '.', '_', '-' or '@', starting with a letter or digit; got {value!r}")
    return value


def workload_name(value) -> str:
    """A workload's name: free text (absent or null: none), printable."""
    return free_text("name", value, MAX_WORKLOAD_NAME)


def free_text(what: str, value, most: int) -> str:
    """Text a user gives that others see (a name, a reason): at most ``most`` characters, printable."""
    value = "" if value is None else value
    if not isinstance(value, str) or len(value) > most:
        raise ValidationError(f"{what} must be text of at most {most} characters")
    bad = UNPRINTABLE.search(value)
    if bad:
        raise ValidationError(f"{what} must not contain control characters (terminal escapes, line breaks, "
                              f"bidirectional overrides); got {bad.group()!r} at position {bad.start()}")
    return value


def _number(what: str, value, *, low: float, high: float, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValidationError(f"{what} must be a number, not {value!r}")
    if not low <= value <= high:
        raise ValidationError(f"{what} must be between {low:g} and {high:g}; got {value!r}")
    return value


def _flag(d: dict, what: str, default: bool) -> bool:
    """A yes/no field: true or false, never a string or number read as one ("false" is not
    false to ``bool``)."""
    value = d.get(what, default)
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be true or false, not {value!r}")
    return value


def _whole(what: str, value, most: int) -> int:
    """A whole number within ±``most`` (1.5 is refused, not cut to 1)."""
    n = _number(what, value, low=-most, high=most)
    if n != int(n):
        raise ValidationError(f"{what} must be a whole number, not {value!r}")
    return int(n)


def _description(d: dict) -> str:
    """What a class or queue is for: text (absent or null: none)."""
    value = d.get("description")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION:
        raise ValidationError(f"description must be text of at most {MAX_DESCRIPTION} characters")
    return value


def _labels(what: str, value) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValidationError(f"{what} must map label names to label values (strings); got {value!r}")
    return dict(value)


def _check_time(what: str, value) -> float | None:
    return _number(what, value, low=0.0, high=MAX_TIME_LIMIT, allow_none=True)


# --- priority classes --------------------------------------------------------

def priority_class(d: dict | PriorityClass) -> PriorityClass:
    if isinstance(d, PriorityClass):
        d = d.to_dict()
    if not isinstance(d, dict):
        raise ValidationError("a priority class must be a mapping")
    unknown = set(d) - set(PriorityClass.__dataclass_fields__)
    if unknown:
        raise ValidationError(f"unknown priority class field(s): {', '.join(sorted(unknown))}")
    pc = PriorityClass(
        name=check_name("priority class name", d.get("name")),
        rank=_whole("rank", d.get("rank", 0), MAX_RANK),
        preemptible=_flag(d, "preemptible", True),
        may_borrow=_flag(d, "may_borrow", True),
        preempt_after=float(_number("preempt_after", d.get("preempt_after", 0.0), low=0, high=MAX_TIME_LIMIT)),
        requeue=_flag(d, "requeue", True),
        description=_description(d),
        swap_after=None if d.get("swap_after") is None else
        float(_number("swap_after", d["swap_after"], low=0, high=MAX_TIME_LIMIT)),
        checkpoint_every=None if d.get("checkpoint_every") is None else
        float(_number("checkpoint_every", d["checkpoint_every"], low=1, high=MAX_TIME_LIMIT)),
        startup=float(_number("startup", d.get("startup", 0.0), low=0, high=MAX_TIME_LIMIT)),
        saves_on_stop=_flag(d, "saves_on_stop", False), groups=_groups(d),
    )
    if pc.swap_after is not None and pc.swap_after < pc.preempt_after:
        raise ValidationError(
            f"priority class {pc.name!r}: swap_after ({pc.swap_after:g} s) is below preempt_after "
            f"({pc.preempt_after:g} s), and a swap is a preemption; give at least {pc.preempt_after:g}")
    if not pc.preemptible and pc.may_borrow:
        raise ValidationError(
            f"priority class {pc.name!r}: work that may not be preempted runs only inside guaranteed "
            "quota, so it cannot borrow; set may_borrow to false or preemptible to true")
    return pc


# --- queues -------------------------------------------------------------------

def queue(d: dict | QueueSpec) -> QueueSpec:
    if isinstance(d, QueueSpec):
        d = d.to_dict()
    if not isinstance(d, dict):
        raise ValidationError("a queue must be a mapping")
    unknown = set(d) - set(QueueSpec.__dataclass_fields__)
    if unknown:
        raise ValidationError(f"unknown queue field(s): {', '.join(sorted(unknown))}")
    name = check_name("queue name", d.get("name"))
    parent = d.get("parent")
    if parent is not None:
        check_name("parent queue", parent)
        if parent == name:
            raise ValidationError(f"queue {name!r} cannot be its own parent")
    guaranteed = parse_vector(d.get("guaranteed"), "guaranteed")
    limit = parse_vector(d.get("limit"), "limit", keep_zero=True)
    for k, g in guaranteed.items():
        if k in limit and limit[k] < g:
            raise ValidationError(
                f"queue {name!r}: limit for {label(k)} ({fmt_amount(k, limit[k])}) is below its "
                f"guarantee ({fmt_amount(k, g)}); raise the limit or lower the guarantee")
    lending = d.get("lending_limit")
    lending = None if lending is None else parse_vector(lending, "lending_limit", keep_zero=True)
    user_limit = parse_vector(d.get("user_limit"), "user_limit", keep_zero=True)
    user_limits_in = d.get("user_limits") or {}
    if not isinstance(user_limits_in, dict):
        raise ValidationError("user_limits must map user names to resource limits")
    user_limits = {check_name("user name", u): parse_vector(v, f"user_limits[{u}]", keep_zero=True)
                   for u, v in user_limits_in.items()}
    idle = d.get("idle") or {}
    if isinstance(idle, IdlePolicy):
        idle = idle.to_dict()
    if not isinstance(idle, dict) or set(idle) - {"warn_after", "release_after"}:
        raise ValidationError("idle must be a mapping with warn_after and/or release_after (seconds)")
    policy = IdlePolicy(_check_time("idle.warn_after", idle.get("warn_after")),
                        _check_time("idle.release_after", idle.get("release_after")))
    if policy.warn_after is not None and policy.release_after is not None \
            and policy.warn_after > policy.release_after:
        raise ValidationError("idle.warn_after must not be later than idle.release_after")
    groups = _groups(d)
    return QueueSpec(
        name=name, parent=parent, guaranteed=guaranteed, limit=limit,
        approval_above=parse_vector(d.get("approval_above"), "approval_above", keep_zero=True), groups=groups,
        weight=float(_number("weight", d.get("weight", 1.0), low=1e-6, high=1e6)),
        may_borrow=_flag(d, "may_borrow", True), lending_limit=lending,
        user_limit=user_limit, user_limits=user_limits, idle=policy,
        description=_description(d))


def queue_tree(specs: list[QueueSpec]) -> None:
    """Whole-tree rules: parents exist, no cycles, children's guarantees fit the parent's."""
    by_name = {s.name: s for s in specs}
    for s in specs:
        if s.parent is not None and s.parent not in by_name:
            raise ValidationError(f"queue {s.name!r} names unknown parent {s.parent!r}")
        seen, cur = set(), s.name
        while cur is not None:
            if cur in seen:
                raise ValidationError(f"queue {s.name!r} is part of a cycle of parents")
            seen.add(cur)
            cur = by_name[cur].parent
    for p in specs:
        kids = [s for s in specs if s.parent == p.name]
        for k, g in p.guaranteed.items():
            total = sum(c.guaranteed.get(k, 0) for c in kids)
            if total > g:
                raise ValidationError(
                    f"sub-queues of {p.name!r} are guaranteed {fmt_amount(k, total)} {label(k)} in total, "
                    f"more than {p.name!r} itself ({fmt_amount(k, g)})")


# --- nodes --------------------------------------------------------------------

def node(d: dict | NodeSpec) -> NodeSpec:
    if isinstance(d, NodeSpec):
        d = d.to_dict()
    if not isinstance(d, dict):
        raise ValidationError("a node must be a mapping")
    unknown = set(d) - set(NodeSpec.__dataclass_fields__)
    if unknown:
        raise ValidationError(f"unknown node field(s): {', '.join(sorted(unknown))}")
    gpus = parse_count("gpus", d.get("gpus", 0))
    if gpus > 64:
        raise ValidationError(f"a node with {gpus} GPUs is not plausible (at most 64)")
    model = d.get("gpu_model")
    if model is not None and (not isinstance(model, str) or not MODEL.match(model)):
        raise ValidationError(f"gpu_model must be a GPU model name like 'a100' (lower case); got {model!r}")
    return NodeSpec(
        name=check_name("node name", d.get("name")), gpus=gpus, gpu_model=model,
        cpu=parse_cpu(d.get("cpu", 0)), memory=parse_memory(d.get("memory", 0)),
        labels=_labels("labels", d.get("labels")), healthy=_flag(d, "healthy", True),
        draining=_flag(d, "draining", False), gpu_memory=parse_memory(d.get("gpu_memory", 0)))


def _groups(d: dict) -> list[str]:
    groups = d.get("groups") or []
    if not isinstance(groups, list):
        raise ValidationError("groups must be a list of JupyterHub group names")
    return [check_name("group name", g) for g in groups]


# --- workloads ----------------------------------------------------------------

def workload_fields(d: dict, state) -> dict:
    """Validated fields of a submission. ``state`` supplies queues, classes and nodes."""
    if not isinstance(d, dict):
        raise ValidationError("a workload must be a mapping")
    allowed = {"user", "queue", "kind", "priority", "resources", "workers", "gpu_model",
               "node_selector", "time_limit", "checkpoint_every", "name", "metadata", "after", "hold",
               "array", "mail", "begin"}
    unknown = set(d) - allowed
    if unknown:
        raise ValidationError(f"unknown workload field(s): {', '.join(sorted(unknown))}")
    user = check_name("user", d.get("user"))
    kind = d.get("kind", "batch")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValidationError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    qname = d.get("queue")
    if not isinstance(qname, str):
        raise ValidationError("queue is required (the name of a queue you may submit to)")
    qspec = state.tree.require_leaf(qname)
    prio = d.get("priority")
    if prio is None or prio == "":
        prio = DEFAULT_CLASS_FOR_KIND[kind]
    if not isinstance(prio, str):
        raise ValidationError(f"priority must be the name of a priority class; got {prio!r}")
    if prio not in state.classes:
        raise NotFound(f"unknown priority class {prio!r} (known: {', '.join(sorted(state.classes))})")
    request = parse_vector(d.get("resources"), "resources")
    model = d.get("gpu_model")
    flavors = [k for k in request if is_flavor(k)]
    if len(flavors) > 1:
        raise ValidationError("ask for one GPU model per workload")
    if flavors:
        fm = flavors[0][4:]
        if model is not None and model != fm:
            raise ValidationError(f"gpu_model {model!r} contradicts resource {flavors[0]!r}")
        model = fm
        request[GPU] = max(request.get(GPU, 0), request[flavors[0]])
    if model is not None:
        if not isinstance(model, str):
            raise ValidationError("gpu_model must be a GPU model name like 'a100'")
        if not MODEL.match(model):
            raise ValidationError(f"gpu_model must be a GPU model name like 'a100'; got {model!r}")
        if not request.get(GPU):
            raise ValidationError(f"gpu_model {model!r} given but no GPUs requested")
        request[flavor_key(model)] = request[GPU]
    workers = d.get("workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ValidationError(f"workers must be a whole number from 1 to {MAX_WORKERS}; got {workers!r}")
    time_limit, checkpoint_every, name = run_fields(d).values()
    _flag(d, "hold", False)            # hold and begin: read by prepare_submissions (holds.py)
    selector = _labels("node_selector", d.get("node_selector"))
    metadata = d.get("metadata")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict):
        raise ValidationError("metadata must be a mapping")
    taken = [k for k in SCHEDULER_METADATA if k in metadata]
    if taken:
        raise ValidationError(f"metadata key(s) {', '.join(map(repr, taken))} are set by ComputeHub, "
                              "not by a submission; use other names")
    fields = dict(user=user, queue=qname, kind=kind, priority=prio, request=request, workers=workers,
                  gpu_model=model, node_selector=selector, time_limit=time_limit,
                  checkpoint_every=checkpoint_every, name=name, after=dependencies.parse(d.get("after")),
                  metadata=dict(metadata))
    mail = mail_types.parse(d.get("mail"))
    if mail:
        fields["metadata"][mail_types.MAIL] = mail
    _check_feasible(fields, qspec, state)
    return fields


def run_fields(d: dict) -> dict:
    """What running work may still change (scheduler/updates.py): its limit, checkpoints, name."""
    time_limit, every = d.get("time_limit"), d.get("checkpoint_every")
    return {"time_limit": None if time_limit is None else
            float(_number("time_limit (seconds)", time_limit, low=1e-3, high=MAX_TIME_LIMIT)),
            "checkpoint_every": None if every is None else
            float(_number("checkpoint_every (seconds)", every, low=1, high=MAX_TIME_LIMIT)),
            "name": workload_name(d.get("name"))}


def _check_feasible(f: dict, qspec: QueueSpec, state) -> None:
    """Refuse work that could never run: bigger than the cluster, a node, or its quota."""
    req, workers = f["request"], f["workers"]
    total = {k: v * workers for k, v in req.items()}
    nodes = [n.spec for n in state.inventory.nodes.values()]
    g = req.get(GPU, 0)
    model = f["gpu_model"]
    # Models under a queue's quota take only work naming them (Inventory.model_fits, inlined:
    # this runs over every node for every submission).
    off = state.inventory.managed_models if g and model is None else frozenset()
    if g or req.get("cpu") or req.get("memory"):
        fitting = [n for n in nodes
                   if n.gpus >= g and n.cpu >= req.get("cpu", 0) and n.memory >= req.get("memory", 0)
                   and (model is None or n.gpu_model == model) and not (off and (n.gpu_model or "") in off)
                   and all(n.labels.get(k) == v for k, v in f["node_selector"].items())]
        if not fitting:
            what = f"{g} {model or ''} GPU(s)".replace("  ", " ") if g else "these CPU/memory resources"
            managed = sorted(state.inventory.managed_models) if g and model is None else []
            raise ValidationError(f"no node in the cluster can hold one worker with {what}"
                                  + (f" and node selector {f['node_selector']}" if f["node_selector"] else "")
                                  + (f" (GPUs of model {', '.join(managed)} take only work that asks for "
                                     "that model, as queues have quotas for it: set gpu_model)" if managed else ""))
        if g:
            avail = sum(n.gpus for n in nodes if (model is None or n.gpu_model == model)
                        and not (off and (n.gpu_model or "") in off))
            if g * workers > avail:
                raise ValidationError(
                    f"gang of {workers} × {g} GPUs is larger than the cluster ({avail} "
                    f"{model + ' ' if model else ''}GPUs in all)")
    tree = state.tree
    for q in tree.chain[qspec.name]:
        for k, v in total.items():
            lim = tree.limit[q].get(k)
            if lim is not None and v > lim:
                raise ValidationError(
                    f"this asks for {fmt_amount(k, v)} {label(k)} but queue {q!r} is limited to "
                    f"{fmt_amount(k, lim)}; ask for less or use another queue")
    ulim = qspec.limit_for_user(f["user"])
    for k, v in total.items():
        if k in ulim and v > ulim[k]:
            raise ValidationError(
                f"this asks for {fmt_amount(k, v)} {label(k)} but your limit in queue {qspec.name!r} "
                f"is {fmt_amount(k, ulim[k])}")
    cls = state.classes[f["priority"]]
    if not cls.preemptible:
        g = tree.guaranteed[qspec.name]
        for k, v in total.items():
            if k in tree.governed[qspec.name] and v > g.get(k, 0):
                raise ValidationError(
                    f"priority class {cls.name!r} runs only inside guaranteed quota, and queue "
                    f"{qspec.name!r} is guaranteed {fmt_amount(k, g.get(k, 0))} {label(k)}; this asks "
                    f"for {fmt_amount(k, v)}")
