"""A tiny async client for the ComputeHub REST API, for spawners.

Spawners talk to the service only through its REST API (docs/service.md), never
through ``hub_ext`` internals. Tornado's ``AsyncHTTPClient`` comes with
JupyterHub, so this needs nothing else.
"""

from __future__ import annotations

import json

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest


class ServiceError(Exception):
    """The service answered with an error (``status`` 0: it could not be reached)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class ServiceClient:
    """``ServiceClient("http://hub/services/computehub", token)``; paths are under ``api/v1/``."""

    def __init__(self, url: str, token: str, timeout: float = 10.0):
        self.base = url.rstrip("/") + "/api/v1/"
        self.token = token
        self.timeout = timeout

    async def request(self, method: str, path: str, body: dict | None = None) -> dict:
        req = HTTPRequest(self.base + path.lstrip("/"), method=method,
                          headers={"Authorization": f"token {self.token}", "Content-Type": "application/json",
                                   "Accept": "application/json"},
                          body=None if body is None else json.dumps(body),
                          request_timeout=self.timeout, connect_timeout=self.timeout,
                          allow_nonstandard_methods=True)
        try:
            resp = await AsyncHTTPClient().fetch(req)
        except HTTPClientError as e:
            raise _error(e.code, e.response.body if e.response is not None else b"") from None
        except OSError as e:
            raise ServiceError(0, "unreachable", f"ComputeHub at {self.base} is unreachable: {e}") from None
        return json.loads(resp.body or b"{}")

    async def submit(self, spec: dict) -> dict:
        return await self.request("POST", "workloads", spec)

    async def get(self, workload_id: str, wait: float = 0, state: str = "") -> dict:
        """The workload; with ``wait`` the service holds the answer until its state is no
        longer ``state`` (default: what it is now) or ``wait`` seconds pass."""
        query = f"?wait={wait:g}" + (f"&state={state}" if state else "") if wait else ""
        return await self.request("GET", f"workloads/{workload_id}{query}")

    async def cancel(self, workload_id: str) -> dict:
        return await self.request("DELETE", f"workloads/{workload_id}")

    async def report(self, workload_id: str, state: str, **extra) -> dict:
        return await self.request("POST", f"workloads/{workload_id}/status", {"state": state, **extra})

    async def report_many(self, reports: list[dict]) -> list[dict]:
        """Several status reports (``{"id", "state", ...}`` each) in one request and one
        commit; one result per report, in order (``status`` 200 with ``body``, or an error)."""
        return (await self.request("POST", "workloads/status", {"reports": reports}))["results"]


def _error(status: int, body: bytes) -> ServiceError:
    try:
        d = json.loads(body)
        return ServiceError(status, str(d.get("error", "error")), str(d.get("message", "")))
    except (ValueError, AttributeError):
        return ServiceError(status, "error", body[:500].decode("utf-8", "replace"))
