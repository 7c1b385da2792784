"""The single-user server's client of the ComputeHub service (REST, HTTP only).

It calls the service with the server's own token (``JUPYTERHUB_API_TOKEN``), so
the browser needs no second login. Every failure becomes an ``UpstreamError``
with a status for the browser and one line saying what went wrong.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest


TERMINAL = ("finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")
RECENT_ENDED = 5      # ended workloads shown after the live ones
LIVE_MAX = 10_000     # my live workloads in one look: the service's largest page (a job array has up to 1,000)


class UpstreamError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class ServiceClient:
    def __init__(self, url: str, token: str, timeout: float = 10.0, serve_prefix: str = ""):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.serve_prefix = serve_prefix   # the browser's path to the service, for serve/<id>/ links
        self._me: tuple[float, dict] | None = None

    async def call(self, method: str, path: str, query: dict | list | None = None, body: dict | None = None):
        if not self.url:
            raise UpstreamError(503, "not_configured",
                                "ComputeHub's address is not set: the spawner sets COMPUTEHUB_URL "
                                "(or configure ComputeHubLab.service_url)")
        if not self.token:
            raise UpstreamError(503, "not_configured",
                                "this server has no JUPYTERHUB_API_TOKEN to call ComputeHub with")
        url = f"{self.url}/api/v1/{path}" + (f"?{urlencode(query, doseq=True)}" if query else "")
        headers = {"Authorization": f"token {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        req = HTTPRequest(url, method=method, headers=headers, body=None if body is None else json.dumps(body),
                          request_timeout=self.timeout, connect_timeout=self.timeout)
        try:
            resp = await AsyncHTTPClient().fetch(req)
        except HTTPClientError as e:
            if e.response is None:        # 599: timeout or connection closed
                raise UpstreamError(503, "service_unreachable",
                                    f"ComputeHub at {self.url} is unreachable: {e.message}") from None
            raise _denied(e.code, e.response.body) from None
        except OSError as e:              # refused, DNS, ...
            raise UpstreamError(503, "service_unreachable",
                                f"ComputeHub at {self.url} is unreachable: {e.strerror or e}") from None
        try:
            return json.loads(resp.body or b"null")
        except ValueError:
            raise UpstreamError(502, "bad_gateway", f"ComputeHub at {self.url} answered with something "
                                                    "that is not JSON") from None

    async def me(self) -> dict:
        if self._me and time.monotonic() - self._me[0] < 60:
            return self._me[1]
        me = await self.call("GET", "me")
        self._me = (time.monotonic(), me)
        return me

    async def my_workloads(self) -> dict:
        """My live workloads (waiting ones with their explanation), a few recently ended, and
        my queues' usage against guarantee and limit."""
        me = await self.me()
        user = me["name"]
        # The latest few ended ones straight from the service's newest-first page: one small
        # query, however long the user's history (the panel asks every few seconds).
        live, recent, queues = await asyncio.gather(
            # Each waiting one with its explanation (position, reason, ETA), in the one request.
            self.call("GET", "workloads", {"user": user, "limit": LIVE_MAX, "explain": "true"}),
            self.call("GET", "workloads", [("user", user), ("limit", RECENT_ENDED), ("order", "newest")]
                      + [("state", s) for s in TERMINAL]),
            self.call("GET", "queues"))
        workloads = live["workloads"]
        ended = sorted(recent["workloads"], key=lambda w: w.get("ended_at") or 0, reverse=True)
        for w in workloads + ended:
            if w.get("kind") == "inference" and self.serve_prefix:
                w["serve_url"] = f"{self.serve_prefix.rstrip('/')}/serve/{quote(w['id'])}/"
        return {"user": user, "workloads": workloads + ended, "mail": bool(me.get("mail")),
                "mail_address": me.get("mail_address") or "",
                "queues": my_queues(queues["queues"], me, workloads)}


def my_queues(queues: list[dict], me: dict, workloads: list[dict]) -> list[dict]:
    """The queues my work is in, and the leaf queues open to my groups."""
    groups = set(me.get("groups") or ())
    used = {w["queue"] for w in workloads}
    mine = [q for q in queues if q["name"] in used or (q.get("leaf") and groups & set(q.get("groups") or ()))]
    if not mine:   # no group queue: the open leaf queues take my work
        mine = [q for q in queues if q.get("leaf") and not q.get("groups")]
    keep = ("name", "usage", "guaranteed", "effective_guaranteed", "limit", "user_limit", "pending", "running",
            "groups")
    return [{k: q.get(k) for k in keep} for q in mine]


def _denied(status: int, body: bytes) -> UpstreamError:
    try:
        err = json.loads(body)
        message, code = err.get("message") or "", err.get("error") or "error"
    except (ValueError, AttributeError):
        message, code = "", "error"
    message = message or f"HTTP {status}"
    if status in (401, 403):
        # The browser's own login is fine; it is this server's token the service refused.
        return UpstreamError(403, "service_denied", f"ComputeHub refused this server's token: {message}")
    if status == 404:
        return UpstreamError(404, code, message)
    if 400 <= status < 500:
        return UpstreamError(status, code, message)
    return UpstreamError(502, "service_error", f"ComputeHub failed ({status}): {message}")
