"""``serve/{workload_id}/...``: an inference service's URL, behind the hub's authentication.

``<hub>/services/computehub/serve/<id>/<path>`` is forwarded to the endpoint the
launcher reported for the workload (``metadata.status.endpoint``, set with
``POST workloads/{id}/status``) once it is ``ready``. Only its owner (and
ComputeHub admins) get through — with a hub API token (``Authorization: token
...``) or the hub login cookie; anything else is a 401/403, and a service that
is not ready (or not there) is a 404. The forwarded request carries no hub
credentials (no ``Authorization``, no cookies) and says who called in
``X-Forwarded-User``. The service's pages are the owner's code served from the
hub's origin: to anyone but the owner (an admin looking in) they come sandboxed
(``Content-Security-Policy: sandbox`` without ``allow-same-origin``), so their
scripts run in an origin of their own and cannot act with the viewer's login.
"""

from __future__ import annotations

from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from scheduler import NotFound

from .base import APIError, BaseHandler

# Connection-level headers are not forwarded either way (RFC 9110 §7.6.1), nor hub credentials.
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
       "transfer-encoding", "upgrade", "host", "content-length"}
DROP_IN = HOP | {"authorization", "cookie", "x-xsrftoken", "x-forwarded-user"}
DROP_OUT = HOP | {"set-cookie"}
OWN = {"date", "server"}     # headers tornado sets itself
TIMEOUT = 300.0      # seconds an inference request may take
# For viewers other than the owner: scripts may run, but in an opaque origin (no allow-same-origin).
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"


class ServeHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

    async def _forward(self, workload_id: str, path: str):
        caller = self.caller
        self.require(caller.can_submit, "use inference services (custom:computehub:submit)")
        try:
            w = self.service.sched.get(workload_id)
        except NotFound:
            raise APIError(404, "not_found", f"no inference service {workload_id!r}") from None
        if w.kind != "inference" or not (caller.is_admin or (caller.kind == "user" and w.user == caller.name)):
            raise APIError(404, "not_found", f"no inference service {workload_id!r}")   # never reveal others'
        status = w.metadata.get("status") or {}
        endpoint = status.get("endpoint")
        if w.state != "running" or not endpoint or not status.get("ready"):
            raise APIError(404, "not_ready", f"inference service {w.id} is not ready ({w.state}); "
                                             "try again when it is running and ready")
        # Tornado hands over the path decoded: quoted again, it stays one path (no CR/LF, '?' or '#').
        url = endpoint.rstrip("/") + "/" + quote(path, safe="/:@!$&'()*+,;=-._~")
        if self.request.query:
            url += "?" + self.request.query
        headers = {k: v for k, v in self.request.headers.get_all() if k.lower() not in DROP_IN}
        headers["X-Forwarded-User"] = caller.name
        headers["X-Forwarded-Prefix"] = self.service.path(f"serve/{w.id}/")
        method = self.request.method
        body = self.request.body if method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS") else None
        req = HTTPRequest(url, method=method, headers=headers, body=body, follow_redirects=False,
                          request_timeout=TIMEOUT, connect_timeout=10, allow_nonstandard_methods=True,
                          decompress_response=False)
        resp = await AsyncHTTPClient().fetch(req, raise_error=False)
        if resp.code == 599:
            raise APIError(502, "bad_gateway", f"inference service {w.id} did not answer: {resp.error}")
        self.set_status(resp.code, resp.reason)
        self.clear_header("Content-Type")
        for k, v in resp.headers.get_all():
            if k.lower() in OWN:
                self.set_header(k, v)          # the service's, not a second one beside tornado's
            elif k.lower() not in DROP_OUT:
                self.add_header(k, v)
        if not (caller.kind == "user" and w.user == caller.name):
            self.add_header("Content-Security-Policy", SANDBOX)
        if resp.body:
            self.write(resp.body)
        self.finish()

    async def get(self, workload_id, path):
        await self._forward(workload_id, path)

    async def post(self, workload_id, path):
        await self._forward(workload_id, path)

    async def put(self, workload_id, path):
        await self._forward(workload_id, path)

    async def patch(self, workload_id, path):
        await self._forward(workload_id, path)

    async def delete(self, workload_id, path):
        await self._forward(workload_id, path)

    async def options(self, workload_id, path):
        await self._forward(workload_id, path)
