"""``api/v1`` resources other than workloads: queues, classes, nodes, approvals, audit, me (usage: usage.py)."""

from __future__ import annotations

import asyncio

from scheduler import Conflict, NotFound, ValidationError
from scheduler.model import HOLDING, PENDING

from . import views
from .base import APIError, BaseHandler

ADMIN = "administer ComputeHub (custom:computehub:admin)"
NODES = "register or change nodes (custom:computehub:nodes or custom:computehub:admin)"


class MeHandler(BaseHandler):
    async def get(self):
        self.write_json({**self.caller.to_dict(), **mail_of(self.service, self.caller)})


def mail_of(svc, caller) -> dict:
    """``mail``: whether work of mine may ask for mail (hub_ext/mail.py; the lab panel offers it only
    then); where it goes, whether that is an address I gave, and in which domains I may give one."""
    user = caller.kind == "user"
    to = svc.address_of(caller.name) if svc.mails and user else ""
    pending = svc.pending_address(caller.name) if svc.mails and user and svc.mail_user_domains else ""
    return {"mail": bool(to), "mail_address": to, "mail_address_own": bool(to and svc.own_address(caller.name)),
            "mail_address_pending": pending,
            "mail_user_domains": list(svc.mail_user_domains) if svc.mails and user else []}


class _MyMailAddress(BaseHandler):
    def _mine(self):
        caller, svc = self.caller, self.service
        if caller.kind != "user":
            raise APIError(403, "forbidden", "only a hub user has a mail address here, not a service")
        if not (svc.smtp_host or svc.mail_maildir):
            raise ValidationError("this ComputeHub sends no mail (its admin sets ComputeHubService.smtp_host)")
        return caller, svc


class MeMailAddressHandler(_MyMailAddress):
    """``PUT me/mail-address`` ``{"address": "ada@lab.example.org"}``: where my mail goes from now on,
    in a domain the admin allows (mail_addresses.py), once confirmed with the code mailed there
    (202); ``""``: back to the admin's address (200)."""

    async def put(self):
        caller, svc = self._mine()
        body = self.json_body()
        if set(body) != {"address"}:
            raise ValidationError('send {"address": "ada@lab.example.org"}, or {"address": ""} to go back to the '
                                  "admin's address")
        address = svc.start_confirmation(caller.name, body["address"])
        if not address:
            svc.set_own_address(caller.name, body["address"], actor=caller.name)
        else:
            code = svc.new_code()
            # The mail server may take seconds: not on the event loop.
            sent = await asyncio.get_running_loop().run_in_executor(None, svc.mail_code, caller.name, address, code)
            if sent == "refused":
                raise ValidationError(f"the mail server refused {address}: no code went there, nothing changed")
            if sent != "sent":
                raise APIError(503, "mail_failed", f"no code could be mailed to {address}: the mail server could "
                               "not be reached or failed; nothing changed, try again later")
            svc.keep_pending(caller.name, address, code, actor=caller.name)
            self.set_status(202)
        self.write_json({"name": caller.name, **mail_of(svc, caller)})


class MeMailAddressConfirmHandler(_MyMailAddress):
    """``POST me/mail-address/confirm`` ``{"code": "12345678"}``: the address I gave is where my mail
    goes from now on, if the code is the one mailed to it."""

    async def post(self):
        caller, svc = self._mine()
        body = self.json_body()
        if set(body) != {"code"}:
            raise ValidationError('send {"code": "12345678"}: the code mailed to the address you gave')
        svc.confirm_own_address(caller.name, body["code"], actor=caller.name)
        self.write_json({"name": caller.name, **mail_of(svc, caller)})


def counts(sched) -> dict:
    """(pending, running) per queue."""
    per_queue: dict[str, list[int]] = {}
    for w in sched.state.workloads.values():
        c = per_queue.setdefault(w.queue, [0, 0])
        if w.state == PENDING:
            c[0] += 1
        elif w.state in HOLDING:
            c[1] += 1
    return {q: tuple(c) for q, c in per_queue.items()}


class QueuesHandler(BaseHandler):
    async def get(self):
        caller = self.caller
        sched = self.service.sched
        per_queue = counts(sched)
        tree = sched.state.tree
        self.write_json({"queues": [views.queue(s, tree, per_queue, caller) for s in tree.specs.values()]})


class QueueHandler(BaseHandler):
    async def get(self, name):
        caller = self.caller
        tree = self.service.sched.state.tree
        if name not in tree.specs:
            raise NotFound(f"unknown queue {name!r}")
        self.write_json(views.queue(tree.specs[name], tree, counts(self.service.sched), caller))

    async def put(self, name):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        body = self.json_body()
        if body.get("name", name) != name:
            raise ValidationError("the queue name in the body differs from the one in the URL")
        body["name"] = name
        existed = name in self.service.sched.state.tree.specs
        spec = self.service.sched.put_queue(body, actor=caller.name)
        self.service.changed()
        sched = self.service.sched
        self.write_json(views.queue(spec, sched.state.tree, counts(sched)), status=200 if existed else 201)

    async def patch(self, name):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        tree = self.service.sched.state.tree
        if name not in tree.specs:
            raise NotFound(f"unknown queue {name!r}")
        body = self.json_body()
        if "name" in body and body["name"] != name:
            raise ValidationError("a queue cannot be renamed")
        merged = {**tree.specs[name].to_dict(), **body}
        spec = self.service.sched.put_queue(merged, actor=caller.name)
        self.service.changed()
        sched = self.service.sched
        self.write_json(views.queue(spec, sched.state.tree, counts(sched)))

    async def delete(self, name):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        self.service.sched.delete_queue(name, actor=caller.name)
        self.set_status(204)
        self.finish()


class ClassesHandler(BaseHandler):
    async def get(self):
        self.caller  # noqa: B018
        classes = sorted(self.service.sched.state.classes.values(), key=lambda c: -c.rank)
        self.write_json({"classes": [c.to_dict() for c in classes]})


class ClassHandler(BaseHandler):
    async def get(self, name):
        self.caller  # noqa: B018
        pc = self.service.sched.state.classes.get(name)
        if pc is None:
            raise NotFound(f"unknown priority class {name!r}")
        self.write_json(pc.to_dict())

    async def put(self, name):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        body = self.json_body()
        body["name"] = name
        existed = name in self.service.sched.state.classes
        pc = self.service.sched.put_class(body, actor=caller.name)
        self.service.changed()
        self.write_json(pc.to_dict(), status=200 if existed else 201)

    async def delete(self, name):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        self.service.sched.delete_class(name, actor=caller.name)
        self.set_status(204)
        self.finish()


class NodesHandler(BaseHandler):
    async def get(self):
        st = self.service.sched.state
        visible = self.visible_to(self.caller)
        self.write_json({"nodes": [views.node(n, st.holders_on(name), visible)
                                   for name, n in sorted(st.inventory.nodes.items())]})


class NodeHandler(BaseHandler):
    def _node(self, name):
        n = self.service.sched.state.inventory.nodes.get(name)
        if n is None:
            raise NotFound(f"unknown node {name!r}")
        return n

    async def get(self, name):
        visible = self.visible_to(self.caller)      # who asks, before whether the node exists
        st = self.service.sched.state
        self.write_json(views.node(self._node(name), st.holders_on(name), visible))

    async def put(self, name):
        caller = self.caller
        self.require(caller.manages_nodes, NODES)
        body = self.json_body()
        body["name"] = name
        existed = name in self.service.sched.state.inventory.nodes
        self.service.sched.put_node(body, actor=caller.name)
        self.service.changed()
        st = self.service.sched.state
        self.write_json(views.node(self._node(name), st.holders_on(name)), status=200 if existed else 201)

    async def patch(self, name):
        """Drain/undrain or mark health: ``{"draining": true}``, ``{"healthy": false}``."""
        caller = self.caller
        self.require(caller.manages_nodes, NODES)
        node = self._node(name)
        body = self.json_body()
        unknown = set(body) - {"draining", "healthy"}
        if unknown or not body:
            raise ValidationError("send draining and/or healthy (true or false)")
        for k, v in body.items():
            if not isinstance(v, bool):
                raise ValidationError(f"{k} must be true or false")
        if body.get("draining") is False and views.cordoned(node.spec):
            # The inventory would drain it again at its next sync: the cordon is Kubernetes'.
            raise Conflict(f"node {name} drains because it is cordoned in Kubernetes: "
                           f"'kubectl uncordon {name}' lifts it (the inventory then undrains it here)")
        self.service.sched.set_node_flags(name, actor=caller.name, **body)
        self.service.changed()
        st = self.service.sched.state
        self.write_json(views.node(self._node(name), st.holders_on(name)))

    async def delete(self, name):
        caller = self.caller
        self.require(caller.manages_nodes, NODES)
        lost = self.service.sched.remove_node(name, actor=caller.name)
        self.service.changed()
        self.write_json({"removed": name, "workloads": [w.id for w in lost]})


class ApprovalsHandler(BaseHandler):
    async def get(self):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        self.write_json({"approvals": [views.workload(w) for w in self.service.sched.approvals()]})


class ApprovalHandler(BaseHandler):
    async def post(self, workload_id):
        caller = self.caller
        self.require(caller.is_admin, ADMIN)
        body = self.json_body()
        approve = body.get("approve")
        if not isinstance(approve, bool):
            raise ValidationError('send {"approve": true} or {"approve": false, "reason": "..."}')
        reason = body.get("reason", "")
        if not isinstance(reason, str):
            raise ValidationError("reason must be text")
        w = self.service.sched.decide(workload_id, approve, actor=caller.name, reason=reason[:2000])
        self.service.changed()
        self.write_json(views.workload(w))


class AuditHandler(BaseHandler):
    """Every admin action and scheduler decision, filterable: the latest ``limit`` events
    that match, oldest first (``order=newest`` for newest first)."""

    async def get(self):
        caller = self.caller
        self.require(caller.is_admin, "read the audit log (custom:computehub:admin)")
        kinds = tuple(self.get_query_arguments("kind")) or None
        order = self.get_query_argument("order", "oldest")
        if order not in ("oldest", "newest"):
            raise APIError(400, "invalid", "order must be oldest or newest")
        events = self.service.sched.events(
            workload_id=self.get_query_argument("workload", None), since=self.query_float("since"),
            until=self.query_float("until"), kinds=kinds, limit=self.query_int("limit", 1000, 1, 100_000),
            newest_first=True)
        if order == "oldest":
            events.reverse()
        self.write_json({"events": [e.to_dict() for e in events]})


