"""The OpenAPI 3 document of the service, served at ``api/v1/openapi.json``.

Paths are relative to the service prefix (``/services/computehub/``). A test
checks that every route of the application is described here and every path
described here is routed.
"""

from __future__ import annotations

from scheduler.ledger import GROUPS
from scheduler.model import KINDS

from .api_workloads import STATES
from .base import BaseHandler
from .openapi_schemas import schemas

_ERR = {"$ref": "#/components/responses/Error"}


def _ok(schema_ref: str, code: str = "200", desc: str = "OK") -> dict:
    return {code: {"description": desc, "content": {"application/json": {"schema": {"$ref": schema_ref}}}}}


def _put(schema_ref: str) -> dict:
    """PUT answers 200 when it replaced something, 201 when it created it."""
    return {**_ok(schema_ref, "200", "Replaced"), **_ok(schema_ref, "201", "Created")}


def _op(summary: str, responses: dict, *, params=(), body: str | None = None, scope: str = "",
        body_required: bool = True) -> dict:
    op = {"summary": summary, "responses": {**responses, "400": _ERR, "401": _ERR, "403": _ERR, "404": _ERR,
                                                "409": _ERR, "default": _ERR}}
    if scope:
        op["description"] = f"Requires scope `{scope}`."
    if params:
        op["parameters"] = list(params)
    if body:
        op["requestBody"] = {"required": body_required,
                             "content": {"application/json": {"schema": {"$ref": body}}}}
    return op


def _path_param(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _q(name: str, schema: dict, desc: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": desc}


ANY = "custom:computehub:submit, custom:computehub:team or custom:computehub:admin"
ADMIN = "custom:computehub:admin"
NODES = "custom:computehub:nodes (or custom:computehub:admin)"


def document(version: str) -> dict:
    wid, qname, nname, cname = (_path_param("workload_id"), _path_param("name"), _path_param("name"),
                                _path_param("name"))
    return {
        "openapi": "3.0.3",
        "info": {"title": "ComputeHub", "version": version,
                 "description": "One quota-and-priority GPU scheduler behind JupyterHub. Authenticate with a "
                                "hub API token (`Authorization: token ...`) or the hub login cookie."},
        "servers": [{"url": "/services/computehub"}],
        "components": {
            "securitySchemes": {"hubToken": {"type": "apiKey", "in": "header", "name": "Authorization"},
                                "reportToken": {"type": "apiKey", "in": "header", "name": "Authorization",
                                                "description": "token $COMPUTEHUB_REPORT_TOKEN: a job's own "
                                                               "token, good only for its checkpoint reports in "
                                                               "its current run"}},
            "responses": {"Error": {"description": "An error", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Error"}}}}},
            "schemas": schemas(),
        },
        "security": [{"hubToken": []}],
        "paths": {
            "/api/v1/me": {"get": _op("Who the caller is and what they may do; `mail`: whether their work may "
                                      "ask for mail, `mail_address`: where it goes", _ok("#/components/schemas/Me"))},
            "/api/v1/me/mail-address": {"put": _op(
                "Where the caller's mail goes from now on: an address of their own in a domain the admin allows "
                "(`mail_user_domains`, in GET me; Slurm's --mail-user); \"\" goes back to the admin's address "
                "(200). A new address is used once confirmed (`mail_address_confirmation`): a code is mailed to it "
                "and the answer is 202 with it in `mail_address_pending`; POST me/mail-address/confirm gives the "
                "code back. 400 for an address that is not one or not in those domains, or that the mail server "
                "refused, or where users may not choose; 403 for a service; 429 for a new code within a minute of "
                "the last or beyond 5 a day; 503 when the mail server failed (nothing changed)",
                {**_ok("#/components/schemas/Me"), **_ok("#/components/schemas/Me", "202", "A code was mailed to it"),
                 "429": _ERR, "503": _ERR}, body="#/components/schemas/MailAddressChange")},
            "/api/v1/me/mail-address/confirm": {"post": _op(
                "The address the caller gave is where their mail goes from now on, with the code mailed to it (good "
                "for a day and 5 tries). 400 for a wrong, used or expired code, or when no address waits for one; "
                "403 for a service", _ok("#/components/schemas/Me"), body="#/components/schemas/MailAddressConfirm")},
            "/api/v1/workloads": {
                "get": _op("List the workloads the caller may see", _ok("#/components/schemas/WorkloadList"),
                           params=[_q("state", {"type": "array", "items": {"type": "string", "enum": list(STATES)}},
                                      "one or more (repeat the parameter)"),
                                   _q("user", {"type": "string"}), _q("queue", {"type": "string"}),
                                   _q("array", {"type": "string"}, "only the tasks of this job array (its first "
                                      "task's id), ended ones too where state= names ended states"),
                                   _q("kind", {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
                                      "one or more (repeat the parameter)"),
                                   _q("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
                                   _q("offset", {"type": "integer", "minimum": 0, "maximum": 10**9}),
                                   _q("order", {"type": "string", "enum": ["oldest", "newest"]},
                                      "oldest (submission order, the default) or newest first: the latest "
                                      "ended work is `state=finished&...&order=newest&limit=N`"),
                                   _q("explain", {"type": "string", "enum": ["true", "false"]},
                                      "true: each waiting workload of the page has its `explanation` (position, "
                                      "reason, start estimate), as GET workloads/{id} gives it: from the line "
                                      "plan; work new in line since gets a simulation of its own, for the first "
                                      "of a job array's tasks waiting in a state and at most 50 a request")],
                           scope=ANY),
                "post": _op("Submit a workload (with `array`: a job array, a task per index, accepted "
                            "together or not at all; the answer is its first task with `tasks`, every task's "
                            "id). 429 too_many_waiting: the user already has as many "
                            "workloads in line as the service allows one user (max_waiting_per_user)",
                            {**_ok("#/components/schemas/Workload", "201", "Accepted"), "429": _ERR},
                            body="#/components/schemas/Submit", scope="custom:computehub:submit"),
            },
            "/api/v1/workloads/{workload_id}": {
                "get": _op("A workload, with position, ETA and reason while it waits. With wait=S the "
                           "answer is held until its state differs from state= (default: its current "
                           "state) or S seconds pass: a long poll for admission",
                           _ok("#/components/schemas/Workload"),
                           params=[wid, _q("wait", {"type": "number", "minimum": 0, "maximum": 30}),
                                   _q("state", {"type": "string", "enum": list(STATES)})], scope=ANY),
                "patch": _op("Change waiting work (Slurm's scontrol update): what it asks for, its limit, "
                             "queue, class or name, checked as a submission; growing or another queue or "
                             "class counts its wait from now, above the approval threshold it waits for an "
                             "admin again. Running work: its name, checkpoint_every, a shorter time_limit. "
                             "With tasks=all, every waiting task of its job array (then `tasks`: their "
                             "ids). 403 for a longer limit asked by its owner; 409 for work that cannot "
                             "change so (ended, a notebook, running)", _ok("#/components/schemas/Workload"),
                             params=[wid, _q("tasks", {"type": "string", "enum": ["one", "all"]},
                                             "all: every waiting task of its job array"),
                                     _q("state", {"type": "string", "enum": ["pending", "held", "awaiting_approval"]},
                                        "with tasks=all (repeatable): only the tasks waiting in these states"),
                                     _q("dry_run", {"type": "string", "enum": ["true", "false"]},
                                        "true: change nothing; answer the workload as it would be, with "
                                        "explanation (its place and start then) and explanation_before")],
                             body="#/components/schemas/Update",
                             scope="custom:computehub:submit (own) or submit-on-behalf"),
                "delete": _op("Cancel a workload: it ends at once (state cancelled), or, while a launcher "
                              "runs it, goes to cancelling and ends once the launcher has stopped it",
                              _ok("#/components/schemas/Workload"), params=[wid],
                              scope="custom:computehub:submit (own) or submit-on-behalf"),
            },
            "/api/v1/workloads/{workload_id}/hold": {
                "post": _op("Keep waiting work (pending, or held for what it runs after) from starting until "
                            "released; an admin's hold only an admin releases. 409 if it is not waiting or "
                            "held already", _ok("#/components/schemas/Workload"), params=[wid],
                            body="#/components/schemas/Hold", body_required=False,
                            scope="custom:computehub:submit (own) or submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/array-limit": {
                "post": _op("How many of a job array's tasks may run at a time from now on (0: no limit), "
                            "{workload_id} any of its tasks: tasks beyond a lowered limit go on, no new one "
                            "starts until fewer run. 400 for work not in an array; 404 when none of its "
                            "tasks waits or runs", _ok("#/components/schemas/ArrayLimit"), params=[wid],
                            body="#/components/schemas/ArrayLimitChange",
                            scope="custom:computehub:submit (own) or submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/array-action": {
                "post": _op("Cancel, hold, release, approve or reject every task of a job array it applies to "
                            "({workload_id} any of its tasks), in one transaction: all of it or none. Tasks "
                            "a rule keeps as they are (an admin's hold) are listed in `refused`; 409 when "
                            "no task is one the action applies to (or, every such task refused, the first "
                            "refusal: 403 or 409); 404 when none of its tasks waits or runs",
                            _ok("#/components/schemas/ArrayActionResult"), params=[wid],
                            body="#/components/schemas/ArrayAction",
                            scope="custom:computehub:submit (own) or submit-on-behalf; approve and reject: "
                                  "custom:computehub:admin")},
            "/api/v1/workloads/{workload_id}/release": {
                "post": _op("Take the hold off: it joins the line now, its wait counted from now (or stays "
                            "held until what it runs after has ended). 403 for an admin's hold released by "
                            "another; 409 if it is not held", _ok("#/components/schemas/Workload"), params=[wid],
                            scope="custom:computehub:submit (own) or submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/top": {
                "post": _op("Put waiting work first among its owner's waiting work of the same queue and "
                            "priority class (Slurm's scontrol top): it takes the best place any of that work "
                            "had, and everyone else's work keeps its place; the latest put first goes first. "
                            "409 if it is not waiting", _ok("#/components/schemas/Workload"), params=[wid],
                            scope="custom:computehub:submit (own) or submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/mail": {
                "post": _op("What live work mails its owner about from now on (begin, end, fail, requeue; all; "
                            "[] for nothing); for a task of a job array, every live task of it. The answer is "
                            "the workload with `tasks`, the ids changed. 400 where the service sends no mail "
                            "or knows no address for its owner; 409 for work that has ended",
                            _ok("#/components/schemas/Workload"), params=[wid],
                            body="#/components/schemas/MailChange",
                            scope="custom:computehub:submit (own) or submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/logs": {
                "get": _op("A workload's log: its last `tail` lines, or with `after` (a byte offset an earlier "
                           "answer gave as `offset`) the whole lines written since; one answer reads at most "
                           "4 MiB (`more` says there is more). 400 for both, or an offset past the end",
                           _ok("#/components/schemas/Logs"),
                           params=[wid, _q("tail", {"type": "integer", "minimum": 1, "maximum": 100000}),
                                   _q("after", {"type": "integer", "minimum": 0})],
                           scope=ANY)},
            "/api/v1/workloads/status": {
                "post": _op("Report on many workloads at once (launchers): each report gets its own result, "
                            "in order; all accepted reports are written in one transaction",
                            _ok("#/components/schemas/StatusResults"), body="#/components/schemas/StatusBatch",
                            scope="custom:computehub:submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/status": {
                "post": _op("Report what happened to admitted work (launchers, spawners); an idle report "
                            "answers with the idle policy's decision",
                            {"200": {"description": "The workload, or the decision on an idle report",
                                     "content": {"application/json": {"schema": {"oneOf": [
                                         {"$ref": "#/components/schemas/Workload"},
                                         {"$ref": "#/components/schemas/IdleDecision"}]}}}}},
                            params=[wid], body="#/components/schemas/Status",
                            scope="custom:computehub:submit-on-behalf")},
            "/api/v1/workloads/{workload_id}/checkpoint": {
                "post": {**_op("Running work saved a checkpoint (the job itself, with its report token): a "
                               "preemption then knows it loses only the work since, and a swap waiting for it "
                               "to save may go ahead", _ok("#/components/schemas/Workload"), params=[wid],
                               body="#/components/schemas/Checkpoint", body_required=False,
                               scope="custom:computehub:submit (own) or submit-on-behalf, or the workload's "
                                     "report token"),
                         "security": [{"reportToken": []}, {"hubToken": []}]}},
            "/api/v1/queues": {"get": _op("Queues with live usage", _ok("#/components/schemas/QueueList"))},
            "/api/v1/queues/{name}": {
                "get": _op("A queue with live usage", _ok("#/components/schemas/Queue"), params=[qname]),
                "put": _op("Create or replace a queue", _put("#/components/schemas/Queue"), params=[qname],
                           body="#/components/schemas/Queue", scope=ADMIN),
                "patch": _op("Change some fields of a queue", _ok("#/components/schemas/Queue"), params=[qname],
                             body="#/components/schemas/Queue", scope=ADMIN),
                "delete": _op("Delete an empty queue", {"204": {"description": "Deleted"}}, params=[qname],
                              scope=ADMIN),
            },
            "/api/v1/classes": {"get": _op("Priority classes", _ok("#/components/schemas/ClassList"))},
            "/api/v1/classes/{name}": {
                "get": _op("A priority class", _ok("#/components/schemas/PriorityClass"), params=[cname]),
                "put": _op("Create or replace a priority class", _put("#/components/schemas/PriorityClass"),
                           params=[cname], body="#/components/schemas/PriorityClass", scope=ADMIN),
                "delete": _op("Delete an unused priority class", {"204": {"description": "Deleted"}},
                              params=[cname], scope=ADMIN),
            },
            "/api/v1/nodes": {"get": _op("Nodes and GPUs with health, drain and use",
                                         _ok("#/components/schemas/NodeList"))},
            "/api/v1/nodes/{name}": {
                "get": _op("A node", _ok("#/components/schemas/Node"), params=[nname]),
                "put": _op("Register or replace a node", _put("#/components/schemas/Node"), params=[nname],
                           body="#/components/schemas/Node", scope=NODES),
                "patch": _op("Drain, undrain, mark health", _ok("#/components/schemas/Node"), params=[nname],
                             body="#/components/schemas/NodeFlags", scope=NODES),
                "delete": _op("Remove a node (its work is requeued or failed)", _ok("#/components/schemas/NodeRemoved"),
                              params=[nname], scope=NODES),
            },
            "/api/v1/usage": {"get": _op("GPU-hours and cost in a window", _ok("#/components/schemas/Usage"),
                                         params=[_q("start", {"type": "number"}), _q("end", {"type": "number"}),
                                                 _q("by", {"type": "string",
                                                           "enum": list(GROUPS)})],
                                         scope=ANY)},
            "/api/v1/approvals": {"get": _op("Workloads waiting for approval", _ok("#/components/schemas/ApprovalList"),
                                             scope=ADMIN)},
            "/api/v1/approvals/{workload_id}": {
                "post": _op("Approve or reject", _ok("#/components/schemas/Workload"), params=[wid],
                            body="#/components/schemas/Decision", scope=ADMIN)},
            "/api/v1/audit": {"get": _op("The audit log: admin actions and scheduler decisions",
                                         _ok("#/components/schemas/Events"),
                                         params=[_q("since", {"type": "number"}), _q("until", {"type": "number"}),
                                                 _q("kind", {"type": "array", "items": {"type": "string"}},
                                                    "repeat for several kinds"),
                                                 _q("workload", {"type": "string"}),
                                                 _q("order", {"type": "string", "enum": ["oldest", "newest"]}),
                                                 _q("limit", {"type": "integer", "minimum": 1, "maximum": 100000})],
                                         scope=ADMIN)},
            "/api/v1/events": {"get": {
                "summary": "Server-sent events: the caller's workloads with state, position, ETA and reason",
                "responses": {"200": {"description": "text/event-stream",
                                      "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                              "401": _ERR, "403": _ERR}}},
            "/api/v1/openapi.json": {"get": {"summary": "This document",
                                             "responses": {"200": {"description": "OpenAPI 3 document"}}}},
            "/serve/{workload_id}/{path}": {m: _op(
                "An inference service, through the hub's authentication (its owner and admins): the request "
                "is forwarded to the endpoint its launcher reported; 404 while it is not ready",
                {"200": {"description": "The service's own answer"}, "502": _ERR},
                params=[wid, {**_path_param("path"), "description": "the rest of the URL (may contain '/')"}],
                scope="custom:computehub:submit (own service) or custom:computehub:admin")
                for m in ("get", "post", "put", "patch", "delete", "options")},
            "/metrics": {"get": {"summary": "Prometheus metrics (scope read:metrics)",
                                 "responses": {"200": {"description": "text/plain exposition format"},
                                               "401": _ERR, "403": _ERR}}},
        },
    }


class OpenAPIHandler(BaseHandler):
    async def get(self):
        self.caller  # noqa: B018 - authenticated like every other call
        self.write_json(document(self.service.version))
