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


class Forbidden(SchedulerError):
    """The caller may not do this to this workload (an admin's hold, released by its owner)."""

    code = "forbidden"
    status = 403


class Conflict(SchedulerError):
    """The request clashes with current state (cancel a finished workload...)."""

    code = "conflict"
    status = 409


class TooManyWaiting(SchedulerError):
    """A user already has as many workloads waiting as one user may (a cap the service sets)."""

    code = "too_many_waiting"
    status = 429


class StoreUnavailable(Exception):
    """The database could not do what was asked: unreachable, restarting, its disk full or
    its file read-only. Not the caller's mistake and not a refusal: try again shortly (the
    service answers 503). Nothing was changed, unless ``in_doubt``: the connection broke while
    the change was being committed, so it may or may not have been made (look before
    repeating it). ``detail`` is the driver's own words, for the log."""

    code = "database_unavailable"
    status = 503

    def __init__(self, detail: str = "", in_doubt: bool = False):
        self.detail = detail
        self.in_doubt = in_doubt
        if in_doubt:
            self.message = ("the connection to the database broke while the change was being committed: it may "
                            "or may not have been made; look before repeating it")
        else:
            self.message = ("the database is unavailable (unreachable, restarting, out of disk space or "
                            "read-only); nothing was changed, try again shortly")
        super().__init__(f"{self.message} ({detail})" if detail else self.message)

    def to_dict(self) -> dict:
        return {"error": self.code, "message": self.message}
