"""The base of every handler: JupyterHub auth, scope checks, JSON in and out, errors.

Errors are always ``{"error": code, "message": text}`` with a 4xx status for
the caller's mistakes; the database being unavailable is a 503
(``database_unavailable``: retry); an unexpected failure is a 500 with the same
shape and no traceback.
"""

from __future__ import annotations

import json
import math

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from tornado import web

from scheduler import SchedulerError, StoreUnavailable

from .scopes import Caller


class APIError(web.HTTPError):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(status, message)
        self.code = code
        self.message = message


_CODES = {400: "invalid", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 413: "too_large", 415: "unsupported_media_type", 429: "too_many_requests"}


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """Authenticated through the hub: an API token (``Authorization: token ...``)
    or the OAuth cookie a browser gets by logging in to the hub."""

    # Whether memory must be what the database holds before the handler runs (see prepare).
    needs_current_memory = True

    @property
    def service(self):
        return self.settings["computehub"]

    async def prepare(self):
        # Resolve the user without blocking the event loop; get_current_user reuses it.
        try:
            self.service.metrics.health.client_seen(await self.hub_auth.get_user(self, sync=False))
        except web.HTTPError as e:
            # The hub's API did not answer (a hub restart, an upgrade): not this service's fault
            # nor the caller's. 503 tells clients to retry; HubAuth says 500 or 502.
            if e.status_code == 502 or (e.status_code == 500 and "Failed to connect" in (e.log_message or "")):
                raise APIError(503, "hub_unavailable", "ComputeHub cannot check your credentials: JupyterHub's "
                                                       "API does not answer (restarting?); try again shortly") from None
            raise
        if (self.request.method not in ("GET", "HEAD", "OPTIONS") and not getattr(self, "_token_authenticated", False)
                and self.get_cookie(self.hub_auth.cookie_name)):
            # Cookie (browser) requests must carry the XSRF token (403 naming it); token requests
            # need not, and a request with neither cookie nor token is a plain 401.
            HubOAuthenticated.check_xsrf_cookie(self)
        # After a failed transaction memory may wait to be rebuilt from the database: until it
        # is, nothing is answered from it (503 while the database cannot be read).
        if self.needs_current_memory:
            self.service.sched.ensure_current()

    def get_current_user(self):
        """``HubAuthenticated.get_current_user`` without its blocking call: it asks
        ``hub_auth.get_user`` again in *sync* mode, which runs the lookup on a helper
        thread's event loop and blocks this one until that thread answers, even though
        ``prepare`` has already resolved the user (``_cached_hub_user``). Under load that
        hand-off took ~20 % of the event loop's time. Same steps, with the cached model."""
        if hasattr(self, "_hub_auth_user_cache") or not hasattr(self, "_cached_hub_user"):
            return super().get_current_user()
        model = self._cached_hub_user
        self._hub_auth_user_cache = None
        if not model:
            return None
        try:
            self._hub_auth_user_cache = self.check_hub_user(model)
        except UserNotAllowed:
            def raise_on_redirect(*args, **kwargs):
                raise web.HTTPError(403, "{kind} {name} is not allowed.".format(**model))

            self.redirect = raise_on_redirect
            return None
        self.hub_auth._persist_url_token_if_set(self)
        return self._hub_auth_user_cache

    def check_xsrf_cookie(self):
        """Tornado checks XSRF before ``prepare``, when it cannot yet know whether the
        request is token-authenticated; ``prepare`` does the check instead."""

    @property
    def caller(self) -> Caller:
        model = self.current_user
        if not model and getattr(self, "_cached_hub_user", None):
            raise APIError(403, "forbidden", "the hub knows you, but your token or login lacks "
                                             "access:services!service=computehub")
        if not model:
            raise APIError(401, "unauthenticated",
                           "log in to the hub or send an API token: 'Authorization: token <token>'")
        return Caller(model)

    def visible_to(self, caller: Caller):
        """Whether ``caller`` may see a workload (its own, its team's as lead, all as admin)."""
        access = self.service.sched.state.tree.access
        return lambda w: caller.may_see(w, access.get(w.queue, ()))

    def require(self, allowed: bool, what: str) -> None:
        if not allowed:
            raise APIError(403, "forbidden", f"your token or login lacks the scope to {what}")

    def get_login_url(self):
        # API clients get a 401 instead of a redirect to the hub's login page.
        raise APIError(401, "unauthenticated",
                       "log in to the hub or send an API token: 'Authorization: token <token>'")

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path and query arguments: tornado refuses bad UTF-8 (400); NUL is refused here, as
        PostgreSQL cannot compare text with it (a filter would fail in the database)."""
        text = super().decode_argument(value, name)
        if "\x00" in text:
            raise APIError(400, "invalid", f"{name or 'an argument'} must not contain NUL characters")
        return text

    # --- JSON ----------------------------------------------------------------------

    def json_body(self) -> dict:
        ctype = self.request.headers.get("Content-Type", "application/json")
        if self.request.body and "json" not in ctype:
            raise APIError(415, "unsupported_media_type", "send the body as application/json")
        if len(self.request.body) > 1_000_000:
            raise APIError(413, "too_large", "request body over 1 MB")
        try:
            # NaN, Infinity and numbers beyond a float's range are not JSON; Python's parser takes them.
            body = json.loads(self.request.body or b"{}", parse_constant=_not_json, parse_float=_finite)
        except RecursionError:
            raise APIError(400, "invalid", f"body is nested deeper than {MAX_DEPTH} levels") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise APIError(400, "invalid", f"body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise APIError(400, "invalid", "body must be a JSON object")
        _check_tree(body)
        return body

    def write_json(self, obj, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(obj, default=_default, allow_nan=False))

    def _query(self, name: str, parse, what: str):
        raw = self.get_query_argument(name, None)
        if raw is None:
            return None
        try:
            return parse(raw)
        except ValueError:
            raise APIError(400, "invalid", f"query parameter {name} must be {what}, not {raw!r}") from None

    def query_float(self, name: str, default=None):
        v = self._query(name, float, "a number")
        if v is not None and not math.isfinite(v):
            raise APIError(400, "invalid", f"query parameter {name} must be finite")
        return default if v is None else v

    def query_int(self, name: str, default: int, low: int, high: int) -> int:
        v = self._query(name, int, "a whole number")
        if v is None:
            return default
        if not low <= v <= high:
            raise APIError(400, "invalid", f"query parameter {name} must be between {low} and {high}")
        return v

    # --- errors --------------------------------------------------------------------

    def _handle_request_exception(self, e):
        if isinstance(e, StoreUnavailable):
            # Not a bug to trace back: the database is down, full or read-only. One line in the log.
            self.service.log.warning("%s %s: 503, database unavailable%s: %s", self.request.method,
                                     self.request.path, " (commit in doubt)" if e.in_doubt else "", e.detail)
            err = APIError(503, e.code, e.message)
            self.send_error(503, exc_info=(APIError, err, None))
            return
        if isinstance(e, SchedulerError):
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)

    def write_error(self, status_code: int, **kwargs):
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, SchedulerError):
            body = exc.to_dict()
        elif isinstance(exc, APIError):
            body = {"error": exc.code, "message": exc.message}
        elif isinstance(exc, web.HTTPError) and status_code < 500:
            body = {"error": _CODES.get(status_code, "error"),
                    "message": exc.log_message or self._reason}
        else:
            body = {"error": "internal", "message": "internal error; the service log has the details"}
        if status_code == 503:      # the database or the hub's API away: counted for the metrics
            self.service.metrics.answered_unavailable(body["error"])
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


MAX_DEPTH = 32


def _not_json(name: str):
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:40]} is out of range")
    return v


def _check_tree(body: dict) -> None:
    """What the JSON parser lets through but nothing after it should see: nesting deeper than
    MAX_DEPTH (recursion in storage and serialisation), text that is not Unicode (lone
    surrogates from ``\\ud800`` escapes) and NUL characters, which databases refuse."""
    stack = [(body, 1)]
    while stack:
        obj, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise APIError(400, "invalid", f"body is nested deeper than {MAX_DEPTH} levels")
        if isinstance(obj, dict):
            for k, v in obj.items():
                _check_text(k)
                stack.append((v, depth + 1))
        elif isinstance(obj, list):
            stack.extend((v, depth + 1) for v in obj)
        elif isinstance(obj, str):
            _check_text(obj)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise APIError(400, "invalid", "text in the body must be valid Unicode (no lone surrogate escapes)") \
            from None
    if "\x00" in text:        # PostgreSQL text and jsonb cannot hold it
        raise APIError(400, "invalid", "text in the body must not contain NUL characters")


def _default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
