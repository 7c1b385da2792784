"""The OpenAPI document's component schemas (``openapi.py`` has the paths): the bodies the
API takes and the objects it answers with."""

from __future__ import annotations

from scheduler.ledger import GROUPS
from scheduler.mail_types import TYPES as MAIL_TYPES

from .api_workloads import STATES

_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$"}
# Not oneOf [integer, number, ...]: an integer is also a number, so 4 would match two and be invalid.
_QUANTITY = {"oneOf": [{"type": "number", "minimum": 0}, {"type": "string"}]}
_VECTOR = {"type": "object", "additionalProperties": _QUANTITY,
           "description": "cpu (cores or '500m'), memory (bytes or '4Gi'), gpu, gpu:<model>"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}


def schemas() -> dict:
    return {
        "Error": {"type": "object", "required": ["error", "message"],
                  "properties": {"error": {"type": "string"}, "message": {"type": "string"}}},
        "Me": {"type": "object", "properties": {
            "mail": {"type": "boolean", "description": "whether the caller's work may ask for mail"},
            "mail_address": {"type": "string", "description": "where the caller's mail goes (\"\": nowhere)"},
            "mail_address_own": {"type": "boolean", "description": "whether that is an address the caller gave"},
            "mail_address_pending": {"type": "string", "description": "an address the caller gave that waits for "
                                                                      "the code mailed to it (\"\": none)"},
            "mail_user_domains": {"type": "array", "items": {"type": "string"},
                                  "description": "domains the caller may give an address in ('*': any; "
                                                 "[]: the admin's address only)"}}},
        "MailAddressChange": {"type": "object", "additionalProperties": False, "required": ["address"],
                              "properties": {"address": {"type": "string", "maxLength": 254,
                                                         "description": "e.g. ada@lab.example.org; \"\": the "
                                                                        "admin's address again"}}},
        "MailAddressConfirm": {"type": "object", "additionalProperties": False, "required": ["code"],
                               "properties": {"code": {"type": "string", "maxLength": 100,
                                                      "description": "the code mailed to the address given"}}},
        "Hold": {"type": "object", "additionalProperties": False, "properties": {
            "reason": {"type": "string", "maxLength": 500, "description": "why it is held, shown with it"},
            "until": {"type": "number", "description": "only until this time (seconds since 1970, UTC; at most 366 "
                                                       "days ahead), then it joins the line by itself; it may "
                                                       "replace a hold the caller could release (a time changed)"}}},
        "ArrayLimitChange": {"type": "object", "additionalProperties": False, "required": ["limit"],
                             "properties": {"limit": {"type": "integer", "minimum": 0, "maximum": 1000,
                                                      "description": "tasks at a time; 0: no limit"}}},
        "ArrayLimit": {"type": "object", "required": ["array", "limit", "tasks"], "properties": {
            "array": {"type": "string", "description": "the array's id (its first task's)"},
            "limit": {"type": "integer"},
            "tasks": {"type": "array", "items": {"type": "string"},
                      "description": "its tasks still waiting or running, each now with this limit"}}},
        "MailChange": {"type": "object", "additionalProperties": False, "required": ["mail"], "properties": {
            "mail": {"oneOf": [{"type": "array", "items": {"type": "string", "enum": [*MAIL_TYPES, "all", "none"]}},
                               {"type": "string", "maxLength": 100}],
                     "description": "the mail types from now on, as at submission; [] or none: no mail"}}},
        "Update": {"type": "object", "additionalProperties": False, "minProperties": 1,
                   "description": "What to change (scheduler/updates.py); all of it or, if one change is "
                                  "refused, none. Running work: name, checkpoint_every and a shorter "
                                  "time_limit only.", "properties": {
            "name": {"type": "string", "maxLength": 128}, "queue": _NAME, "priority": _NAME,
            "resources": {**_VECTOR, "description": "merged into the request: {\"gpu\": 4} changes the GPUs "
                                                    "only; 0 takes a resource out"},
            "workers": {"type": "integer", "minimum": 1, "maximum": 1024},
            "gpu_model": {"type": "string", "nullable": True},
            "time_limit": {"type": "number", "minimum": 0, "nullable": True,
                           "description": "seconds; longer than now, or null (none), only by an admin"},
            "checkpoint_every": {"type": "number", "minimum": 1, "nullable": True}}},
        "ArrayAction": {"type": "object", "additionalProperties": False, "required": ["action"], "properties": {
            "action": {"type": "string", "enum": ["cancel", "hold", "release", "approve", "reject", "top"]},
            "reason": {"type": "string", "maxLength": 2000,
                       "description": "why (hold: at most 500 characters; reject); cancel and release take none"},
            "states": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": list(STATES)},
                       "description": "only the tasks in these states (a row of its pending tasks: pending)"},
            "until": {"type": "number", "description": "hold only: until this UNIX time, then each task joins "
                                                       "the line by itself (Hold's until)"}}},
        "ArrayActionResult": {"type": "object", "required": ["array", "action", "tasks", "states", "refused"],
                              "properties": {
            "array": {"type": "string", "description": "the array's id (its first task's)"},
            "action": {"type": "string"},
            "tasks": {"type": "array", "items": {"type": "string"}, "description": "the tasks it acted on"},
            "states": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "each of them: its state now"},
            "refused": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "tasks left as they were: why"}}},
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
                "type": "string", "pattern": "^w?[0-9]{1,12}(\\[\\])?(:(ok|any|failed|corr))?$"},
                "description": "Workloads of the same user to run after: each id with :ok (the default: "
                               "it finished), :any (it ended) or :failed (it ended without finishing); "
                               "w12[] names every task of job array w12 (at most 1,064 with them); in an "
                               "array's submission w12[]:corr runs each task after w12's task of the same "
                               "index (Slurm's aftercorr). "
                               "Until then the workload is `held`; if one ends otherwise it is "
                               "cancelled, saying why. Not for notebooks."},
            "hold": {"type": "boolean", "description": "Submit it held: it starts only once released "
                                                       "(POST workloads/{id}/release)"},
            "begin": {"type": "number", "description": "Not before this time (seconds since 1970, UTC; Slurm's "
                                                       "--begin): until then it is `held`, and the first cycle "
                                                       "from then on lets it join the line (POST "
                                                       "workloads/{id}/release: sooner). At most 366 days ahead; "
                                                       "a time past is no hold; not with hold, not for notebooks"},
            "array": {"type": "string", "maxLength": 1000, "pattern": "^[0-9,:% -]+$",
                      "description": "A job array: one task per index, Slurm's syntax: 0-9, 1,3,5-11:2, at most "
                                     "1000 tasks of indexes up to 999999; %N runs at most N at a time "
                                     "(0-99%10). Each task is a workload; its job gets "
                                     "COMPUTEHUB_ARRAY_ID, COMPUTEHUB_ARRAY_TASK_ID and "
                                     "COMPUTEHUB_ARRAY_TASK_COUNT. Batch and training work only."},
            "mail": {"oneOf": [{"type": "array", "items": {"type": "string", "enum": [*MAIL_TYPES, "all"]}},
                               {"type": "string", "maxLength": 100}],
                     "description": "Mail the owner (the admin's mail_address for the user) when it "
                                    "begins, ends (however), fails, or is requeued (preempted, or its "
                                    "node lost); all is every one (Slurm's --mail-type). A list, or "
                                    "one text with commas. A job array mails once when its first task "
                                    "starts and once when all have ended. Recorded as metadata.mail. "
                                    "400 where the service sends no mail."},
            "node_selector": _LABELS, "user": _NAME, "metadata": {
                "type": "object",
                "description": "Free-form data for the launcher (metadata.job) and for you; the keys "
                               "status, ran_s, preempted_by, moved_for, hold and mail (among "
                               "others) are ComputeHub's own and refused (400)"}}},
        "Workload": {"type": "object", "required": ["id", "state", "user", "queue"],
                     "properties": {"id": {"type": "string"}, "state": {"type": "string"},
                                    "user": {"type": "string"}, "queue": {"type": "string"},
                                    "position": {"type": "integer"},
                                    "after": {"type": "array", "items": {"type": "string"},
                                              "description": "what it runs after, as id:condition"},
                                    "array": {"type": "object", "nullable": True,
                                              "description": "its place in a job array: id (the "
                                              "array's first task), index, size (tasks), limit (at most "
                                              "that many at a time; 0: no cap); null: submitted alone",
                                              "properties": {"id": {"type": "string"},
                                                             "index": {"type": "integer"},
                                                             "size": {"type": "integer"},
                                                             "limit": {"type": "integer"}}},
                                    "tasks": {"type": "array", "items": {"type": "string"},
                                              "description": "in the answer to submitting an array "
                                              "only: the id of each task, in index order"},
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
            "by": {"type": "string", "enum": list(GROUPS)},
            "rows": {"type": "array", "items": {"type": "object", "properties": {
                "gpu_seconds": {"type": "number"}, "gpu_hours": {"type": "number"},
                "cost": {"type": "number", "description": "GPU-hours × the flavor's price (prices)"},
                "user": {"type": "string", "description": "by workload or array: whose it is"},
                "queue": {"type": "string", "description": "by workload or array: its queue"}},
                "additionalProperties": {"type": "string", "description": "the key: the `by` field"}}}}},
    }
