"""``computehub quota | nodes | approvals | approve | reject``: queues, nodes and approvals.

Everybody may read quotas and nodes; changing them, and deciding approvals,
needs ``custom:computehub:admin`` (the service answers 403 otherwise, which
the command prints in one line). See cli_client for the shared behaviour.
"""

from __future__ import annotations

import time

from traitlets import Bool, Float, Unicode

from .cli import UsageError
from .cli_client import ClientCommand, gpus_of, human_duration, printable, table
from .cli_client_arrays import ARRAY_FLAG, collapse, name_of
from .cli_each import act_on_arrays

_ADMIN_NOTE = " Needs the ComputeHub admin scope (custom:computehub:admin)."


def _gpu(vector: dict | None):
    return None if not vector or "gpu" not in vector else vector["gpu"]


def _queue_line(q: dict) -> str:
    lim, ulim = _gpu(q.get("limit")), _gpu(q.get("user_limit"))
    return (f"queue {q['name']}: guaranteed {_gpu(q.get('guaranteed')) or 0} GPUs, limit "
            f"{'none' if lim is None else lim}, weight {q['weight']:g}, per-user limit "
            f"{'none' if ulim is None else ulim}")


class QuotaApp(ClientCommand):
    name = "computehub quota"
    description = ("The queues with their GPU quota and what they use now: GUAR is the guarantee "
                   "(never lent away while the queue needs it; EFF the effective one, for parents the "
                   "sum of their children's), LIMIT the hard cap, PER-USER the per-user cap, WEIGHT the "
                   "share of idle capacity, USED the GPUs allocated now. 'computehub quota set' "
                   "changes a queue (admins).")
    examples = """
computehub quota
computehub quota --json
computehub quota set vision --guaranteed-gpus 8 --weight 2
"""
    subcommands = {"set": ("hub_ext.cli_client_admin.QuotaSetApp",
                           "Change a queue's GPU guarantee, limit, per-user limit or weight (admins)."),
                   "create": ("hub_ext.cli_client_queues.QuotaCreateApp",
                              "Create a queue (admins)."),
                   "delete": ("hub_ext.cli_client_queues.QuotaDeleteApp",
                              "Delete an empty queue (admins).")}

    def run(self):
        data = self.client().queues()
        if self.json:
            self.emit(data)
            return
        queues = data["queues"]
        by_name = {q["name"]: q for q in queues}

        def depth(q):
            d, p = 0, q.get("parent")
            while p in by_name and d < 32:
                d, p = d + 1, by_name[p].get("parent")
            return d

        order, seen = [], set()

        def walk(q):
            if q["name"] in seen:
                return
            seen.add(q["name"])
            order.append(q)
            for child in q.get("children") or []:
                if child in by_name:
                    walk(by_name[child])

        for q in queues:
            if q.get("parent") not in by_name:
                walk(q)
        order += [q for q in queues if q["name"] not in seen]
        rows = [["  " * depth(q) + q["name"], _gpu(q.get("guaranteed")) or 0,
                 _gpu(q.get("effective_guaranteed")) or 0,
                 _none(_gpu(q.get("limit"))), _none(_gpu(q.get("user_limit"))), f"{q['weight']:g}",
                 _gpu(q.get("usage")) or 0, q["pending"], q["running"], ",".join(q.get("groups") or [])]
                for q in order]
        print(table(rows, ["QUEUE", "GUAR", "EFF", "LIMIT", "PER-USER", "WEIGHT", "USED", "PENDING", "RUNNING",
                           "GROUPS"]))


def _none(v):
    return "none" if v is None else v


class QuotaSetApp(ClientCommand):
    name = "computehub quota set"
    description = ("computehub quota set QUEUE [options]: change one queue's GPU quota. Only what you "
                   "give changes; other resources in the queue's guarantee and limits are kept. Use "
                   "'none' to remove a limit." + _ADMIN_NOTE)
    examples = """
computehub quota set vision --guaranteed-gpus 8 --limit-gpus 16
computehub quota set nlp --weight 2 --user-limit-gpus 4
computehub quota set nlp --limit-gpus none
"""
    positional, usage_args = 1, "a queue name (computehub quota set QUEUE --weight 2)"
    guaranteed_gpus = Unicode("", help="GPUs (count) the queue is guaranteed.").tag(config=True)
    limit_gpus = Unicode("", help="Hard cap on the queue's GPUs (count), or 'none'.").tag(config=True)
    user_limit_gpus = Unicode("", help="GPUs (count) one user may hold in the queue, or 'none'.").tag(config=True)
    weight = Float(None, allow_none=True,
                   help="Share of idle capacity in fair share (a number > 0).").tag(config=True)
    aliases = {**ClientCommand.aliases, "guaranteed-gpus": "QuotaSetApp.guaranteed_gpus",
               "limit-gpus": "QuotaSetApp.limit_gpus", "user-limit-gpus": "QuotaSetApp.user_limit_gpus",
               "weight": "QuotaSetApp.weight"}

    def _count(self, option: str, text: str, may_be_none: bool):
        t = text.strip().lower()
        if may_be_none and t == "none":
            return None
        if not t.isdigit():
            extra = " or 'none'" if may_be_none else ""
            raise UsageError(f"{option} expects a whole number of GPUs (0 or more){extra}, not {text!r}")
        return int(t)

    def run(self, name):
        changes = []
        if self.guaranteed_gpus:
            changes.append(("guaranteed", self._count("--guaranteed-gpus", self.guaranteed_gpus, False)))
        if self.limit_gpus:
            changes.append(("limit", self._count("--limit-gpus", self.limit_gpus, True)))
        if self.user_limit_gpus:
            changes.append(("user_limit", self._count("--user-limit-gpus", self.user_limit_gpus, True)))
        if self.weight is not None and not self.weight > 0:
            raise UsageError(f"--weight must be more than 0, not {self.weight:g}")
        if not changes and self.weight is None:
            raise UsageError("nothing to change: give --guaranteed-gpus, --limit-gpus, --user-limit-gpus "
                             "and/or --weight")
        ch = self.client()
        current = ch.queue(name)
        body: dict = {} if self.weight is None else {"weight": self.weight}
        for field, gpus in changes:          # PATCH replaces a whole vector: keep its other entries
            vector = {k: v for k, v in (current.get(field) or {}).items() if k != "gpu"}
            if gpus is not None:
                vector["gpu"] = gpus
            body[field] = vector
        q = ch.set_queue(name, **body)
        if self.json:
            self.emit(q)
        else:
            print(_queue_line(q))


class NodesApp(ClientCommand):
    name = "computehub nodes"
    description = ("The nodes with their GPUs (free/total), CPU, memory, state and the workloads on them. "
                   "'computehub nodes drain NAME' stops placing new work on a node (what runs there keeps "
                   "running); 'undrain' resumes.")
    examples = """
computehub nodes
computehub nodes drain gpu-b
computehub nodes undrain gpu-b
"""
    subcommands = {
        "drain": ("hub_ext.cli_client_admin.DrainApp", "Stop placing new work on a node (admins)."),
        "undrain": ("hub_ext.cli_client_admin.UndrainApp", "Place work on a drained node again (admins)."),
    }

    def run(self):
        data = self.client().nodes()
        if self.json:
            self.emit(data)
            return
        rows = [[n["name"], n.get("gpu_model") or "-", f"{len(n.get('free_gpus') or [])}/{n['gpus']}",
                 _cores(n.get("cpu")), _gib(n.get("memory")), _node_state(n),
                 ", ".join(_holder(w) for w in n.get("workloads") or []) or "-"]
                for n in data["nodes"]]
        if not rows:
            print("no nodes registered")
            return
        print(table(rows, ["NODE", "MODEL", "FREE GPUS", "CPU", "MEMORY", "STATE", "WORKLOADS"]))


def _holder(w: dict) -> str:
    """A workload on a node: whose, and whether it is being stopped (or past the service's stop
    deadline without being reported stopped: its GPUs stay held)."""
    if not w.get("id"):
        return "another user's"
    how = ", not stopped" if w.get("stop_overdue") else ", stopping" if w.get("stopping_since") else ""
    return f"{w['id']} ({w['user']}{how})"


def _cores(cpu) -> str:
    text = str(cpu)
    return f"{int(text[:-1]) / 1000:g}" if text.endswith("m") and text[:-1].isdigit() else text


def _gib(n) -> str:
    return f"{n / 2**30:.0f}Gi" if isinstance(n, (int, float)) else str(n)


def _node_state(n: dict) -> str:
    states = [s for s, on in (("unhealthy", not n.get("healthy", True)), ("draining", n.get("draining")),
                              ("cordoned", n.get("cordoned")), ("simulated", n.get("simulated")),
                              ("kubernetes", n.get("source") == "kubernetes")) if on]
    return ",".join(states) or "ok"


class DrainApp(ClientCommand):
    name = "computehub nodes drain"
    description = ("computehub nodes drain NAME: stop placing new work on a node; what runs there keeps "
                   "running." + _ADMIN_NOTE)
    examples = "\ncomputehub nodes drain gpu-b\n"
    positional, usage_args = 1, "a node name"
    draining = True

    def run(self, name):
        n = self.client().drain(name, self.draining)
        if self.json:
            self.emit(n)
        else:
            print(f"node {n['name']}: {_node_state(n)}, {len(n.get('workloads') or [])} workload(s) on it")


class UndrainApp(DrainApp):
    name = "computehub nodes undrain"
    description = "computehub nodes undrain NAME: place new work on a drained node again." + _ADMIN_NOTE
    examples = "\ncomputehub nodes undrain gpu-b\n"
    draining = False


class ApprovalsApp(ClientCommand):
    name = "computehub approvals"
    description = ("Workloads waiting for an admin's approval (those asking for more than their queue's "
                   "approval threshold). Decide with 'computehub approve ID' or "
                   "'computehub reject ID --reason TEXT'." + _ADMIN_NOTE)
    examples = "\ncomputehub approvals\ncomputehub approve w0000042\ncomputehub approve --array w0000050\n"

    def run(self):
        ch = self.client()
        data = ch.approvals()
        if self.json:
            self.emit(data)
            return
        if not data["approvals"]:
            print("nothing awaits approval")
            return
        now = ch.now()          # the service's clock: its times are counted on it
        # A job array's tasks are one row (decided together with --array); --json has each.
        rows = [[w["id"], w["user"], w["queue"], w["kind"], gpus_of(w), human_duration(now - w["submitted_at"]),
                 name_of(w) or "-"] for w in collapse(data["approvals"])]
        print(table(rows, ["ID", "USER", "QUEUE", "KIND", "GPUS", "WAITING", "NAME"]))


class ApproveApp(ClientCommand):
    name = "computehub approve"
    description = ("computehub approve ID: approve a workload that awaits approval; it joins its queue's "
                   "line. With --array, every task of that job array that awaits approval." + _ADMIN_NOTE)
    examples = "\ncomputehub approve w0000042\ncomputehub approve --array w0000050\n"
    positional, usage_args = 1, "a workload id"
    reason = Unicode("", help="Why (text, recorded in the audit log).").tag(config=True)
    array = Bool(False, help=ARRAY_FLAG).tag(config=True)
    aliases = {**ClientCommand.aliases, "reason": "ApproveApp.reason"}
    flags = {**ClientCommand.flags, "array": ({"ApproveApp": {"array": True}}, ARRAY_FLAG)}
    approve = True

    def run(self, wid):
        if not self.approve and not self.reason.strip():
            raise UsageError("say why with --reason TEXT: the user sees it")
        ch = self.client()
        if self.array:
            return act_on_arrays(ch, [wid], "approve" if self.approve else "reject", self.reason)
        w = ch.decide(wid, self.approve, self.reason)
        if self.json:
            self.emit(w)
        else:
            print(self._line(w))

    @staticmethod
    def _line(w: dict) -> str:
        return f"{w['id']}  {w['state']}" + (f"  ({printable(w['reason'])})" if w.get("reason") else "")


class RejectApp(ApproveApp):
    name = "computehub reject"
    description = ("computehub reject ID --reason TEXT: reject a workload that awaits approval; the "
                   "reason is required and shown to the user." + _ADMIN_NOTE)
    examples = '\ncomputehub reject w0000042 --reason "8 GPUs for a week: split it into shorter runs"\n'
    aliases = {**ClientCommand.aliases, "reason": "RejectApp.reason"}
    flags = {**ClientCommand.flags, "array": ({"RejectApp": {"array": True}}, ARRAY_FLAG)}
    approve = False
