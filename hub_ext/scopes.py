"""ComputeHub's JupyterHub scopes and what a caller may see and do.

Decisions are by scope, never by user name. The hub grants the scopes through
its RBAC (roles for users, groups and services); ``hubconfig`` declares them.

* ``custom:computehub:submit``: submit work and see/cancel one's own.
* ``custom:computehub:team!group=G``: a team lead sees the work in queues open
  to group G (an unfiltered ``custom:computehub:team`` sees every team).
* ``custom:computehub:submit-on-behalf``: for spawners: submit, see and cancel
  work for any user (never admin changes).
* ``custom:computehub:nodes``: for inventory sources: register, update and
  remove nodes (never queues, work or anything else).
* ``custom:computehub:admin``: everything, including queues, classes, nodes,
  approvals and the audit log.
* ``read:metrics`` (the hub's own scope) reads ``/metrics``.
"""

from __future__ import annotations

PREFIX = "custom:computehub:"
SUBMIT = PREFIX + "submit"
TEAM = PREFIX + "team"
ON_BEHALF = PREFIX + "submit-on-behalf"
ADMIN = PREFIX + "admin"
NODES = PREFIX + "nodes"
READ_METRICS = "read:metrics"

CUSTOM_SCOPES = {
    SUBMIT: {"description": "Submit GPU work to ComputeHub and see or cancel your own."},
    TEAM: {"description": "See the ComputeHub work of a team (use with !group=<team>)."},
    ON_BEHALF: {"description": "Submit, see and cancel ComputeHub work for any user (spawners)."},
    NODES: {"description": "Register, update and remove ComputeHub's nodes (inventory sources)."},
    ADMIN: {"description": "Administer ComputeHub: queues, quotas, classes, nodes, approvals, audit."},
}


class Caller:
    """Who is calling and what their scopes allow."""

    def __init__(self, model: dict):
        self.name: str = model["name"]
        self.kind: str = model.get("kind", "user")
        self.groups: set[str] = set(model.get("groups") or ())
        self.scopes: set[str] = set(model.get("scopes") or ())
        self.is_admin = ADMIN in self.scopes
        self.manages_nodes = self.is_admin or NODES in self.scopes
        self.on_behalf = self.is_admin or ON_BEHALF in self.scopes
        self.can_submit = self.on_behalf or SUBMIT in self.scopes
        self.all_teams = self.is_admin or TEAM in self.scopes
        self.team_groups = {s.split("!group=", 1)[1] for s in self.scopes if s.startswith(TEAM + "!group=")}

    @property
    def sees_anything(self) -> bool:
        return self.can_submit or self.all_teams or bool(self.team_groups)

    def leads(self, groups) -> bool:
        """A team lead of one of ``groups`` (a queue's, as ``QueueTree.access`` has them)."""
        return bool(self.team_groups & set(groups))

    def may_see(self, workload, groups) -> bool:
        """``groups``: those of the workload's queue (``QueueTree.access``; () if none or gone)."""
        if self.on_behalf or self.all_teams:
            return True
        if self.kind == "user" and self.can_submit and workload.user == self.name:
            return True
        return self.leads(groups)

    def may_cancel(self, workload) -> bool:
        return self.on_behalf or (self.kind == "user" and self.can_submit and workload.user == self.name)

    def may_use_queue(self, groups) -> bool:
        """Open queues (no groups, their own or inherited) take anyone's work; others only
        their groups' members'."""
        return self.on_behalf or not groups or bool(self.groups & set(groups))

    def may_use_class(self, pc) -> bool:
        """Classes naming groups are their members' (spawners and admins submit with any)."""
        return self.on_behalf or not pc.groups or bool(self.groups & set(pc.groups))

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "groups": sorted(self.groups),
                "admin": self.is_admin, "can_submit": self.can_submit,
                "submit_on_behalf": self.on_behalf, "manage_nodes": self.manages_nodes,
                "teams": "all" if self.all_teams else sorted(self.team_groups)}
