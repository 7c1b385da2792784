"""The audit log as jupyter_events structured events.

Every admin action and scheduler decision is an event in the scheduler's store
(who, what, when, before → after), readable through ``api/v1/audit``. The
service also emits each one, once committed, through a jupyter_events
``EventLogger`` so that the hub's logging pipeline (files, collectors) sees the
same records with a registered, versioned schema.
"""

from __future__ import annotations

import logging

from jupyter_events import EventLogger

SCHEMA_ID = "https://computehub.dev/events/audit"
SCHEMA = {
    "$id": SCHEMA_ID,
    "version": "1",
    "title": "ComputeHub audit event",
    "description": "An admin action or a scheduling decision recorded by ComputeHub.",
    "type": "object",
    "required": ["kind", "time"],
    "properties": {
        "id": {"title": "Event id", "description": "Sequence number in the audit log",
               "type": ["integer", "null"]},
        "time": {"title": "Time", "description": "UNIX time of the event in seconds", "type": "number"},
        "kind": {"title": "Kind", "description": "submitted, admitted, preempted, queue_updated, ...",
                 "type": "string"},
        "workload_id": {"title": "Workload", "description": "The workload concerned, if any",
                        "type": ["string", "null"]},
        "actor": {"title": "Actor", "description": "Who did it (user or service); empty for the scheduler",
                  "type": "string"},
        "reason": {"title": "Reason", "description": "Why, in words", "type": "string"},
        "data": {"title": "Data", "description": "Details: placement, before and after, preemptor...",
                 "type": "object"},
    },
}


class AuditEmitter:
    """Emits store events with id greater than the last one emitted."""

    def __init__(self, handlers: list[logging.Handler] | None = None):
        self.logger = EventLogger(handlers=handlers or [])
        self.logger.register_event_schema(SCHEMA)
        self.last_id = 0

    def start_after(self, last_id: int) -> None:
        self.last_id = last_id

    def emit_new(self, store) -> int:
        n = 0
        for e in store.get_events(after_id=self.last_id):
            self.logger.emit(schema_id=SCHEMA_ID, data={
                "id": e.id, "time": e.time, "kind": e.kind, "workload_id": e.workload_id,
                "actor": str(e.data.get("actor", "")), "reason": e.reason, "data": e.data})
            self.last_id = e.id
            n += 1
        return n
