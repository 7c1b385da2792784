"""``computehub quota create | delete`` and ``computehub classes [set | delete]`` (admins)."""

from __future__ import annotations

from traitlets import Bool, Float, Int, Unicode

from .cli import UsageError
from .cli_client import ClientCommand, table

_ADMIN = " Needs the ComputeHub admin scope (custom:computehub:admin)."


class QuotaCreateApp(ClientCommand):
    name = "computehub quota create"
    description = "computehub quota create QUEUE [options]: create a queue." + _ADMIN
    examples = """
computehub quota create robotics --parent org --guaranteed-gpus 8 --limit-gpus 16 --groups robotics
"""
    positional, usage_args = 1, "a queue name (computehub quota create QUEUE --parent org)"
    parent_queue = Unicode("", help="Parent queue (empty: a top-level queue).").tag(config=True)
    guaranteed_gpus = Int(0, help="GPUs (count) the queue is guaranteed.").tag(config=True)
    limit_gpus = Int(-1, help="Hard cap on the queue's GPUs (count); -1: no cap.").tag(config=True)
    user_limit_gpus = Int(-1, help="GPUs (count) one user may hold; -1: no cap.").tag(config=True)
    weight = Float(1.0, help="Share of idle capacity in fair share (> 0).").tag(config=True)
    groups = Unicode("", help="Comma-separated JupyterHub groups whose members may submit "
                              "(empty: its parent's, or everyone if no ancestor names any).").tag(config=True)
    aliases = {**ClientCommand.aliases, "parent": "QuotaCreateApp.parent_queue",
               "guaranteed-gpus": "QuotaCreateApp.guaranteed_gpus", "limit-gpus": "QuotaCreateApp.limit_gpus",
               "user-limit-gpus": "QuotaCreateApp.user_limit_gpus", "weight": "QuotaCreateApp.weight",
               "groups": "QuotaCreateApp.groups"}

    def run(self, name):
        ch = self.client()
        if name in {q["name"] for q in ch.queues()["queues"]}:
            raise UsageError(f"queue {name!r} exists already; change it with 'computehub quota set'")
        body = {"guaranteed": {"gpu": self.guaranteed_gpus}, "weight": self.weight,
                "groups": [g.strip() for g in self.groups.split(",") if g.strip()]}
        if self.parent_queue:
            body["parent"] = self.parent_queue
        if self.limit_gpus >= 0:
            body["limit"] = {"gpu": self.limit_gpus}
        if self.user_limit_gpus >= 0:
            body["user_limit"] = {"gpu": self.user_limit_gpus}
        q = ch.put_queue(name, **body)
        if self.json:
            self.emit(q)
        else:
            print(f"created queue {q['name']}" + (f" under {q['parent']}" if q.get("parent") else ""))


class QuotaDeleteApp(ClientCommand):
    name = "computehub quota delete"
    description = "computehub quota delete QUEUE: delete a queue with no sub-queues and no work." + _ADMIN
    positional, usage_args = 1, "a queue name"

    def run(self, name):
        self.client().delete_queue(name)
        print(f"deleted queue {name}")


class ClassesApp(ClientCommand):
    name = "computehub classes"
    description = ("Priority classes: rank (higher first), whether work may be preempted, may borrow idle "
                   "quota, and the minimum run time before preemption. 'classes set' and 'classes delete' "
                   "change them (admins).")
    subcommands = {"set": ("hub_ext.cli_client_queues.ClassSetApp", "Create or change a class (admins)."),
                   "delete": ("hub_ext.cli_client_queues.ClassDeleteApp", "Delete an unused class (admins).")}

    def run(self):
        data = self.client().classes()
        if self.json:
            self.emit(data)
            return
        rows = [[c["name"], c["rank"], "yes" if c["preemptible"] else "no", "yes" if c["may_borrow"] else "no",
                 f"{c['preempt_after']:g}s",
                 "-" if c.get("swap_after") is None else f"{c['swap_after']:g}s", _checkpoints(c),
                 c.get("description", "")]
                for c in data["classes"]]
        print(table(rows, ["CLASS", "RANK", "PREEMPTIBLE", "BORROWS", "PREEMPT AFTER", "SWAP AFTER", "CHECKPOINTS",
                           "DESCRIPTION"]))


def _checkpoints(c: dict) -> str:
    parts = []
    if c.get("checkpoint_every") is not None:
        parts.append(f"every {c['checkpoint_every']:g}s" + (f" after {c['startup']:g}s" if c.get("startup") else ""))
    if c.get("saves_on_stop"):
        parts.append("on stop")
    return ", ".join(parts) or "-"


class ClassSetApp(ClientCommand):
    name = "computehub classes set"
    description = "computehub classes set NAME --rank R [options]: create or replace a class." + _ADMIN
    examples = """
computehub classes set urgent --rank 350 --no-preemptible
computehub classes set scavenger --rank 50 --preempt-after 0
computehub classes set training --rank 200 --preempt-after 600 --swap-after 1800
computehub classes set training --rank 200 --preempt-after 600 --checkpoint-every 1800 --startup 60
computehub classes set training --rank 200 --preempt-after 600 --saves-on-stop
computehub classes set urgent --groups ml-leads       # only ml-leads' members may submit with it
computehub classes set training --checkpoint-every 3600   # an existing class: only what is given changes
"""
    positional, usage_args = 1, "a class name"
    rank = Int(0, help="Rank: higher goes first.").tag(config=True)
    preemptible = Bool(True, help="May be preempted (work that may not runs only inside guarantees).").tag(
        config=True)
    preempt_after = Float(0.0, help="Seconds a workload runs before it may be preempted.").tag(config=True)
    swap_after = Float(None, allow_none=True, help=(
        "Seconds a workload runs (since it last started) before shorter work of its own queue and "
        "class may swap it out; at least --preempt-after (the default). Give the work's checkpoint "
        "interval, and swapped work always keeps some progress.")).tag(config=True)
    checkpoint_every = Float(None, allow_none=True, help=(
        "Seconds of progress between the checkpoints the class's work saves. Swaps for shorter work "
        "then wait until a victim has just saved (the engine's swap_loss, 5 minutes by default); "
        "reclaim for a guarantee does not wait.")).tag(config=True)
    startup = Float(0.0, help=(
        "Seconds each start of the class's work spends before it makes progress (loading its "
        "checkpoint); with --checkpoint-every, where its checkpoints fall.")).tag(config=True)
    saves_on_stop = Bool(False, help=(
        "The class's work saves a checkpoint when told to stop (its images handle SIGTERM within the "
        "grace period): a preemption then loses only the restart, and swaps for shorter work take it "
        "at once. Work seen doing so is known without this.")).tag(config=True)
    description_text = Unicode("", help="What the class is for.").tag(config=True)
    groups = Unicode("", help="Comma-separated JupyterHub groups whose members may submit with the class "
                              "(empty: everyone; spawners and admins always may).").tag(config=True)
    aliases = {**ClientCommand.aliases, "rank": "ClassSetApp.rank", "preempt-after": "ClassSetApp.preempt_after",
               "swap-after": "ClassSetApp.swap_after", "checkpoint-every": "ClassSetApp.checkpoint_every",
               "startup": "ClassSetApp.startup", "groups": "ClassSetApp.groups",
               "description": "ClassSetApp.description_text"}
    flags = {**ClientCommand.flags,
             "no-preemptible": ({"ClassSetApp": {"preemptible": False}}, "Never preempt this class's work."),
             "saves-on-stop": ({"ClassSetApp": {"saves_on_stop": True}},
                               "The class's work saves a checkpoint when told to stop.")}

    # option (trait) -> the class's field
    FIELDS = {"rank": "rank", "preemptible": "preemptible", "preempt_after": "preempt_after",
              "swap_after": "swap_after", "checkpoint_every": "checkpoint_every", "startup": "startup",
              "saves_on_stop": "saves_on_stop", "description_text": "description", "groups": "groups"}

    def run(self, name):
        ch = self.client()
        existing = {c["name"]: c for c in ch.classes()["classes"]}.get(name)
        given = set(self.config.get("ClassSetApp", {}))
        # A new class gets every option (defaults included); an existing one changes only in what
        # is given, so re-setting one knob does not reset the others (requeue, description, ...).
        body = dict(existing or {})
        for trait, key in self.FIELDS.items():
            if existing is None or trait in given:
                body[key] = getattr(self, trait)
        body["groups"] = [g.strip() for g in body["groups"].split(",") if g.strip()] \
            if isinstance(body.get("groups"), str) else body.get("groups", [])
        if existing is None or "preemptible" in given:
            body["may_borrow"] = body["preemptible"]
        body = {k: v for k, v in body.items() if k != "name" and not (v is None and k in ("swap_after",
                                                                                              "checkpoint_every"))}
        c = ch.put_class(name, **body)
        if self.json:
            self.emit(c)
        else:
            print(f"class {c['name']}: rank {c['rank']}, preemptible {'yes' if c['preemptible'] else 'no'}")


class ClassDeleteApp(ClientCommand):
    name = "computehub classes delete"
    description = "computehub classes delete NAME: delete a class no pending or running work uses." + _ADMIN
    positional, usage_args = 1, "a class name"

    def run(self, name):
        self.client().delete_class(name)
        print(f"deleted class {name}")
