"""The OpenAPI 3 document of the service, served at ``api/v1/openapi.json``.

Paths are relative to the service prefix (``/services/computehub/``). A test
checks that every route of the application is described here and every path
described here is routed.
"""

from __future__ import annotations

from scheduler.model import KINDS

from .api_workloads import STATES
from .base import BaseHandler

_ERR = {"$ref": "#/components/responses/Error"}
_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$"}
# Not oneOf [integer, number, ...]: an integer is also a number, so 4 would match two and be invalid.
_QUANTITY = {"oneOf": [{"type": "number", "minimum": 0}, {"type": "string"}]}
_VECTOR = {"type": "object", "additionalProperties": _QUANTITY,
           "description": "cpu (cores or '500m'), memory (bytes or '4Gi'), gpu, gpu:<model>"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}


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
            "schemas": {
                "Error": {"type": "object", "required": ["error", "message"],
                          "properties": {"error": {"type": "string"}, "message": {"type": "string"}}},
                "Me": {"type": "object"},
                "Submit": {"type": "object", "additionalProperties": False, "properties": {
                    "name": {"type": "string", "maxLength": 128,
                             "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069]*$",
                             "description": "any text but control characters and bidi overrides"},
                    "queue": _NAME,
                    "kind": {"type": "string", "enum": ["notebook", "training", "inference", "batch"]},
                    "priority": _NAME, "resources": _VECTOR,
                    "workers": {"type": "integer", "minimum": 1, "maximum": 1024},
                    "gpu_model": {"type": "string"}, "time_limit": {"type": "number", "minimum": 0},
                    "checkpoint_every": {"type": "number", "minimum": 1,
                                         "description": "Seconds of progress between the job's checkpoints "
                                                        "(default: its priority class's); swaps for shorter "
                                                        "work of its team wait until it has just saved"},
                    "after": {"type": "array", "maxItems": 64, "items": {
                        "type": "string", "pattern": "^w?[0-9]{1,12}(:(ok|any|failed))?$"},
                        "description": "Workloads of the same user to run after: each id with :ok (the default: "
                                       "it finished), :any (it ended) or :failed (it ended without finishing). "
                                       "Until then the workload is `held`; if one ends otherwise it is "
                                       "cancelled, saying why. Not for notebooks."},
                    "node_selector": _LABELS, "user": _NAME, "metadata": {
                        "type": "object",
                        "description": "Free-form data for the launcher (metadata.job) and for you; the keys "
                                       "status, ran_s, preempted_by and moved_for are ComputeHub's "
                                       "own and refused (400)"}}},
                "Workload": {"type": "object", "required": ["id", "state", "user", "queue"],
                             "properties": {"id": {"type": "string"}, "state": {"type": "string"},
                                            "user": {"type": "string"}, "queue": {"type": "string"},
                                            "position": {"type": "integer"},
                                            "after": {"type": "array", "items": {"type": "string"},
                                                      "description": "what it runs after, as id:condition"},
                                            "eligible_at": {"type": "number", "nullable": True,
                                                            "description": "when the work it runs after let it "
                                                            "join the line (UNIX time); its wait counts from "
                                                            "then; null: from its submission"},
                                            "checkpointed_at": {"type": "number", "nullable": True,
                                                                "description": "when the running work last "
                                                                "reported a saved checkpoint (UNIX time)"},
                                            "checkpoint_seen_every": {"type": "number", "nullable": True,
                                                                      "description": "seconds between its "
                                                                      "last two reported checkpoints of one run"},
                                            "saves_on_stop": {"type": "boolean", "description": "seen saving a "
                                                              "checkpoint when preempted: a preemption loses "
                                                              "only its restart"},
                                            "report_token": {"type": "string", "description": "the job's token "
                                                             "for its own checkpoint reports in this run (to its "
                                                             "owner and launchers, while it holds GPUs)"},
                                            "explanation": {"$ref": "#/components/schemas/Explanation"}}},
                "Explanation": {"type": "object", "description": "Why pending work waits and when it may start",
                                "properties": {
                                    "position": {"type": "integer", "description": "place among all pending work"},
                                    "position_in_queue": {"type": "integer"}, "queue_length": {"type": "integer"},
                                    "pending": {"type": "integer"}, "reason": {"type": "string"},
                                    "blocker": {"type": "object", "description": "the reason's numbers"},
                                    "eta": {"type": "number", "nullable": True,
                                            "description": "estimated start (epoch s)"},
                                    "eta_seconds": {"type": "number", "nullable": True},
                                    "eta_reason": {"type": "string", "description": "how the ETA was made"},
                                    "eta_earliest": {"type": "boolean", "description": (
                                        "the ETA is only a lower bound: the work would start on GPUs borrowed "
                                        "beyond its queue's guarantee, after whatever other queues are owed "
                                        "and submit meanwhile")}}},
                "WorkloadList": {"type": "object", "properties": {
                    "workloads": {"type": "array", "items": {"$ref": "#/components/schemas/Workload"}},
                    "total": {"type": "integer"}, "offset": {"type": "integer"}, "limit": {"type": "integer"},
                    "order": {"type": "string", "enum": ["oldest", "newest"]}}},
                "ApprovalList": {"type": "object", "required": ["approvals"], "properties": {
                    "approvals": {"type": "array", "items": {"$ref": "#/components/schemas/Workload"}}}},
                "StatusBatch": {"type": "object", "required": ["reports"], "properties": {
                    "reports": {"type": "array", "minItems": 1, "maxItems": 1000, "items": {"allOf": [
                        {"$ref": "#/components/schemas/Status"},
                        {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}]}}}},
                "StatusResults": {"type": "object", "properties": {"results": {"type": "array", "items": {
                    "type": "object", "properties": {
                        "id": {"type": "string", "nullable": True},
                        "status": {"type": "integer", "description": "200, or the 4xx this report alone "
                                   "would have had"},
                        "body": {"description": "with 200: the workload, or the decision on an idle report"},
                        "error": {"type": "string"}, "message": {"type": "string"}}}}}},
                "Status": {"type": "object", "required": ["state"], "properties": {
                    "state": {"type": "string", "enum": ["running", "update", "checkpoint", "finished",
                                                         "failed", "stopped", "idle"]},
                    "exit_code": {"type": "integer"}, "reason": {"type": "string"},
                    "node_lost": {"type": "boolean", "description": "with failed: the node went away; the "
                                  "workload requeues if its class requeues"},
                    "endpoint": {"type": "string", "maxLength": 500,
                                 "description": "http(s) URL where serve/{id}/ forwards (inference)"},
                    "message": {"type": "string", "maxLength": 2000}, "node": {"type": "string", "maxLength": 2000},
                    "ready": {"type": "boolean"}, "restarts": {"type": "integer", "minimum": 0},
                    "idle_since": {"type": "number", "minimum": 0, "description": "UNIX time"},
                    "at": {"type": "number", "minimum": 0, "description": "with checkpoint: when the work "
                           "saved one (UNIX time; absent: now)"},
                    "on_stop": {"type": "boolean", "description": "with checkpoint: the save was made when the "
                                "work was told to stop (it is being preempted)"}}},
                "Checkpoint": {"type": "object", "additionalProperties": False, "properties": {
                    "at": {"type": "number", "minimum": 0, "description": "when the work saved the checkpoint "
                           "(UNIX time; absent: now)"},
                    "on_stop": {"type": "boolean", "description": "saved when told to stop (being preempted): "
                                "from then on a preemption loses only its restart"}}},
                "IdleDecision": {"type": "object", "required": ["action"], "properties": {
                    "action": {"type": "string"}, "idle_seconds": {"type": "number"},
                    "warn_after": {"type": "number", "nullable": True},
                    "release_after": {"type": "number", "nullable": True}, "gpus": {"type": "number"},
                    "gpu_hours_returned": {"type": "number"}, "release_at": {"type": "number", "nullable": True}}},
                "Logs": {"type": "object", "properties": {
                    "id": {"type": "string"}, "lines": {"type": "array", "items": {"type": "string"}},
                    "offset": {"type": "integer", "description": "the byte after the last whole line given: "
                                                                 "the next read's `after`"},
                    "size": {"type": "integer", "description": "the log's length when read (bytes)"},
                    "partial": {"type": "boolean", "description": "the last line is still being written "
                                                                  "(it lies past `offset`)"},
                    "more": {"type": "boolean", "description": "cut at 4 MiB: read again at once"}}},
                "Queue": {"type": "object", "properties": {
                    "name": _NAME, "parent": {"type": "string", "nullable": True}, "guaranteed": _VECTOR,
                    "limit": _VECTOR, "weight": {"type": "number"}, "may_borrow": {"type": "boolean"},
                    "lending_limit": {"type": "object", "nullable": True, "additionalProperties": _QUANTITY},
                    "user_limit": _VECTOR, "user_limits": {"type": "object", "additionalProperties": _VECTOR},
                    "idle": {"type": "object"}, "approval_above": _VECTOR,
                    "groups": {"type": "array", "items": _NAME}, "description": {"type": "string"}}},
                "QueueList": {"type": "object", "properties": {
                    "queues": {"type": "array", "items": {"$ref": "#/components/schemas/Queue"}}}},
                "PriorityClass": {"type": "object", "properties": {
                    "name": _NAME, "rank": {"type": "integer"}, "preemptible": {"type": "boolean"},
                    "may_borrow": {"type": "boolean"}, "preempt_after": {"type": "number", "minimum": 0},
                    "requeue": {"type": "boolean"}, "description": {"type": "string"},
                    "groups": {"type": "array", "items": _NAME, "description": (
                        "JupyterHub groups whose members may submit with the class; empty: everyone")},
                    "swap_after": {"type": "number", "minimum": 0, "nullable": True},
                    "checkpoint_every": {"type": "number", "minimum": 1, "nullable": True,
                                         "description": "Seconds of progress between the checkpoints "
                                                        "the class's work saves; swaps wait for one."},
                    "startup": {"type": "number", "minimum": 0,
                                "description": "Seconds each start spends before making progress."},
                    "saves_on_stop": {"type": "boolean",
                                      "description": "The class's work saves a checkpoint when told to stop "
                                                     "(SIGTERM), so a preemption loses only its restart."}}},
                "ClassList": {"type": "object"},
                "Node": {"type": "object", "properties": {
                    "name": _NAME, "gpus": {"type": "integer", "minimum": 0, "maximum": 64},
                    "gpu_model": {"type": "string", "nullable": True}, "cpu": _QUANTITY, "memory": _QUANTITY,
                    "labels": _LABELS, "healthy": {"type": "boolean"}, "draining": {"type": "boolean"},
                    "source": {"type": "string", "enum": ["kubernetes", "registered"], "readOnly": True,
                               "description": "kubernetes: kept in step with the cluster by computehub-inventory"},
                    "cordoned": {"type": "boolean", "readOnly": True,
                                 "description": "draining because it is cordoned in Kubernetes: only an "
                                                "uncordon there lifts it (undraining it here is a 409)"},
                    "workloads": {"type": "array", "readOnly": True, "description": (
                        "what runs there; work the caller may not see has id and user null"),
                        "items": {"type": "object", "properties": {
                            "id": {"type": "string", "nullable": True},
                            "user": {"type": "string", "nullable": True},
                            "gpus": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                            "state": {"type": "string", "description": "only where id is shown"},
                            "stopping_since": {"type": "number", "nullable": True, "description": (
                                "preempting or cancelling: when it was told to stop (UNIX time)")},
                            "stop_overdue": {"type": "boolean", "description": (
                                "told to stop longer ago than the service's stop_deadline, and not "
                                "reported stopped: its GPUs stay held until it is")}}}}}},
                "NodeFlags": {"type": "object", "additionalProperties": False, "properties": {
                    "healthy": {"type": "boolean"}, "draining": {"type": "boolean"}}},
                "NodeList": {"type": "object", "properties": {
                    "nodes": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}},
                "NodeRemoved": {"type": "object", "required": ["removed", "workloads"], "properties": {
                    "removed": {"type": "string"}, "workloads": {"type": "array", "items": {"type": "string"}}}},
                "Decision": {"type": "object", "required": ["approve"], "properties": {
                    "approve": {"type": "boolean"}, "reason": {"type": "string"}}},
                "Events": {"type": "object"},
                "Usage": {"type": "object", "properties": {
                    "start": {"type": "number"}, "end": {"type": "number"},
                    "by": {"type": "string", "enum": ["workload", "user", "queue", "flavor"]},
                    "rows": {"type": "array", "items": {"type": "object", "properties": {
                        "gpu_seconds": {"type": "number"}, "gpu_hours": {"type": "number"},
                        "cost": {"type": "number", "description": "GPU-hours × the flavor's price (prices)"},
                        "user": {"type": "string", "description": "by workload: whose it is"},
                        "queue": {"type": "string", "description": "by workload: its queue"}},
                        "additionalProperties": {"type": "string", "description": "the key: the `by` field"}}}}},
            },
        },
        "security": [{"hubToken": []}],
        "paths": {
            "/api/v1/me": {"get": _op("Who the caller is and what they may do", _ok("#/components/schemas/Me"))},
            "/api/v1/workloads": {
                "get": _op("List the workloads the caller may see", _ok("#/components/schemas/WorkloadList"),
                           params=[_q("state", {"type": "array", "items": {"type": "string", "enum": list(STATES)}},
                                      "one or more (repeat the parameter)"),
                                   _q("user", {"type": "string"}), _q("queue", {"type": "string"}),
                                   _q("kind", {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
                                      "one or more (repeat the parameter)"),
                                   _q("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
                                   _q("offset", {"type": "integer", "minimum": 0, "maximum": 10**9}),
                                   _q("order", {"type": "string", "enum": ["oldest", "newest"]},
                                      "oldest (submission order, the default) or newest first: the latest "
                                      "ended work is `state=finished&...&order=newest&limit=N`")], scope=ANY),
                "post": _op("Submit a workload. 429 too_many_waiting: the user already has as many "
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
                "delete": _op("Cancel a workload: it ends at once (state cancelled), or, while a launcher "
                              "runs it, goes to cancelling and ends once the launcher has stopped it",
                              _ok("#/components/schemas/Workload"), params=[wid],
                              scope="custom:computehub:submit (own) or submit-on-behalf"),
            },
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
                                                           "enum": ["workload", "user", "queue", "flavor"]})],
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
