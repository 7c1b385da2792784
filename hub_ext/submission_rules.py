"""The service's own rules for a submission, before the scheduler validates it: who may submit
for whom, node selectors, the queue (named, or picked from the user's groups) and the priority
class a caller may use. Mixed into ``ComputeHubService``."""

from __future__ import annotations

import json
import os
import time
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient
from traitlets import HasTraits, Integer, observe, validate

from scheduler import ValidationError
from scheduler.config_checks import check_number
from scheduler.job_env import check_job_env
from scheduler.model import DEFAULT_CLASS_FOR_KIND

from .base import APIError


class SubmissionRules(HasTraits):
    """Needs ``sched``, ``allowed_node_selectors`` and ``_groups`` (a cache) of the service."""

    max_waiting_per_user = Integer(10000, config=True,
                                   help="The most workloads one user may have waiting in line (pending) at "
                                        "once: a submission beyond it is refused with 429 "
                                        "too_many_waiting and a sentence saying so, so that one script "
                                        "submitting in a loop cannot bury the queue (Slurm's "
                                        "MaxSubmitJobsPerUser). Running work, and work awaiting an admin's "
                                        "approval, do not count. 0 = no cap.")

    @validate("max_waiting_per_user")
    def _max_waiting_ok(self, proposal):
        return int(check_number("ComputeHubService.max_waiting_per_user", proposal.value, low=0, unit="workloads"))

    @observe("max_waiting_per_user")
    def _pass_max_waiting_on(self, change):
        if getattr(self, "sched", None) is not None:
            self.sched.max_waiting_per_user = change.new

    async def submission_for(self, caller, body: dict) -> dict:
        """The scheduler spec for a caller's submission, after the service's own rules."""
        spec = dict(body)
        check_job_env(spec.get("metadata"))     # NVIDIA_* would pick the container's GPUs: refused
        if "user" in spec and (not isinstance(spec["user"], str) or not spec["user"]):
            raise ValidationError("user must be a user name (text)")
        if "user" in spec and spec["user"] != caller.name and not caller.on_behalf:
            raise APIError(403, "forbidden", "only spawners and admins may submit for another user")
        if not caller.on_behalf and caller.kind != "user":
            raise APIError(403, "forbidden", "a service submits only with custom:computehub:submit-on-behalf")
        if caller.kind != "user" and "user" not in spec:
            raise ValidationError("a service must name the user it submits for ('user')")
        spec.setdefault("user", caller.name)
        self.check_mail_wanted(spec)
        selector = spec.get("node_selector") or {}
        if selector and not caller.on_behalf:
            if not isinstance(selector, dict):
                raise ValidationError("node_selector must map label names to values")
            # An allowed entry is a label key (any value) or key=value (that value only).
            allowed_set = set(self.allowed_node_selectors)
            bad = sorted(f"{k}={v}" for k, v in selector.items()
                         if k not in allowed_set and f"{k}={v}" not in allowed_set)
            if bad:
                allowed = ", ".join(self.allowed_node_selectors) or "none"
                raise APIError(403, "forbidden", f"node_selector {', '.join(bad)} not allowed "
                                                 f"(an admin allows: {allowed})")
        specs = self.sched.state.tree.specs
        if "queue" not in spec:
            # Someone else's work goes to a queue open to *their* groups, which the hub knows.
            groups = caller.groups if spec["user"] == caller.name else await self.user_groups(spec["user"])
            tree = self.sched.state.tree
            leaves = [(q, tree.access[q]) for q in specs if tree.is_leaf(q)]
            # A queue of one's groups first; else one open to everyone.
            mine = [q for q, g in leaves if g and groups & set(g)] or [q for q, g in leaves if not g]
            if not mine:
                whose = "your" if spec["user"] == caller.name else f"{spec['user']}'s"
                raise ValidationError(f"no queue given and none is open to {whose} groups; name one with 'queue'")
            spec["queue"] = sorted(mine)[0]
        self.check_line(caller, spec)
        return spec

    def check_line(self, caller, spec: dict) -> None:
        """Whether ``caller`` may put work in the spec's queue and priority class (groups)."""
        q = self.sched.state.tree.specs.get(spec.get("queue")) if isinstance(spec.get("queue"), str) else None
        if q is not None and not caller.may_use_queue(open_to := self.sched.state.tree.access[q.name]):
            whose = "" if q.groups else " (inherited: it names none of its own)"
            raise APIError(403, "forbidden", f"queue {q.name!r} is open to groups {', '.join(open_to)}{whose}, "
                                             "not to yours")
        kind = spec.get("kind", "batch")      # validated later; here only to find the class
        prio = spec.get("priority") or (DEFAULT_CLASS_FOR_KIND.get(kind) if isinstance(kind, str) else None)
        pc = self.sched.state.classes.get(prio) if isinstance(prio, str) else None
        if pc is not None and not caller.may_use_class(pc):
            raise APIError(403, "forbidden", f"priority class {pc.name!r} is open to groups "
                                             f"{', '.join(pc.groups)}, not to yours")

    async def user_groups(self, user: str) -> set[str]:
        """A hub user's groups, asked of the hub with the service's own token (cached a minute)."""
        hit = self._groups.get(user)
        if hit and hit[0] > time.time():
            return hit[1]
        api = os.environ.get("JUPYTERHUB_API_URL", "").rstrip("/")
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not (api and token and isinstance(user, str)):
            raise ValidationError("name the queue ('queue') when submitting for another user")
        try:
            r = await AsyncHTTPClient().fetch(f"{api}/users/{quote(user, safe='')}", raise_error=False,
                                              headers={"Authorization": f"token {token}"}, request_timeout=10)
        except OSError as e:
            raise APIError(503, "unavailable", f"could not ask the hub for {user}'s groups: {e}") from None
        if r.code == 404:
            raise ValidationError(f"the hub has no user {user!r}")
        if r.code != 200:
            raise ValidationError(f"the hub did not tell {user}'s groups ({r.code}); name the queue ('queue')")
        groups = set(json.loads(r.body).get("groups") or [])
        self._groups[user] = (time.time() + 60, groups)
        return groups
