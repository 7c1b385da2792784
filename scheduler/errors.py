"""Errors the scheduler raises for a caller's mistake.

Every error carries a short machine code and a message a person can act on,
so the service can turn it into ``{"error": code, "message": text}`` with a
4xx status without guessing.
"""


class SchedulerError(Exception):
    """Base class: a request the scheduler refuses. Nothing was changed."""

    code = "invalid"
    status = 400

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code

    def to_dict(self) -> dict:
        return {"error": self.code, "message": self.message}


class ValidationError(SchedulerError):
    """Malformed or absurd input (negative resources, limits below guarantees...)."""

    code = "invalid"


class NotFound(SchedulerError):
    """A named queue, class, node or workload does not exist."""

    code = "not_found"
    status = 404


class Conflict(SchedulerError):
    """The request clashes with current state (cancel a finished workload...)."""

    code = "conflict"
    status = 409
