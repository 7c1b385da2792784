"""The server extension: ``<base_url>computehub/...`` in the single-user server.

``GET  computehub/workloads``             my work, my queues (proxied to the service)
``DELETE computehub/workloads/{id}``      cancel one of mine
``POST computehub/workloads/{id}/hold``    keep one of mine from starting (``/release``: let it go;
                                          ``/top``: first among my own)
``POST computehub/workloads/{id}/array-action``  cancel, hold or release a row of a job array's tasks at once
``PATCH computehub/workloads/{id}``       change one of mine (``?dry_run=true``: try it; ``?tasks=all``)
``POST computehub/workloads/{id}/mail``    what one of mine mails me about (``{"mail": ["end"]}``)
``GET  computehub/workloads/{id}/logs``   its logs (``?tail=N``, or ``?after=BYTES``: what is new)
``GET  computehub/gpu``                   this server's GPUs from NVML

Handlers are jupyter_server API handlers: the browser's Lab session (cookie +
XSRF, or a token) authenticates them, like every other Lab request.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Float, Int, Unicode, default
from traitlets.config import Configurable

from .gpu import GPUReader
from .jobs import default_url
from .service import ServiceClient, UpstreamError

# What the panel's Change… form may change (a priority class, workers or GPU model: the CLI, %update).
PANEL_CHANGES = {"resources", "time_limit", "queue", "name"}


class ComputeHubLab(Configurable):
    """Where the single-user server finds ComputeHub, and how it samples GPUs."""

    service_url = Unicode(config=True, help="""The ComputeHub service's URL with its prefix, e.g.
        http://127.0.0.1:10101/services/computehub. Default: $COMPUTEHUB_URL (the queued spawners set it),
        else the hub's public URL ($JUPYTERHUB_PUBLIC_HUB_URL without /hub/) + services/<service_name>;
        '' = not configured (the endpoints say so).""")
    api_token = Unicode(config=True, help="""Token for calling the service: default $JUPYTERHUB_API_TOKEN,
        the server's own. It needs custom:computehub:submit and access:services!service=computehub
        (Spawner.server_token_scopes).""")
    service_name = Unicode("computehub", config=True, help="The service's name in the hub (its URL prefix).")
    public_prefix = Unicode(config=True, help="""The path under which browsers reach the service, for
        links such as <prefix>serve/<id>/. Default: $JUPYTERHUB_BASE_URL + services/<service_name>/.""")
    request_timeout = Float(10.0, config=True, help="Seconds to wait for the service before calling it unreachable.")
    gpu_history = Int(60, config=True, help="Utilisation samples kept per GPU for the panel's sparkline.")
    gpu_sample_gap = Float(1.0, config=True, help="""Seconds between two samples kept in the history (more
        frequent reads, e.g. from several open tabs, are answered but not recorded).""")

    @default("service_url")
    def _service_url(self):
        return default_url(f"services/{self.service_name}") or ""

    @default("api_token")
    def _api_token(self):
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @default("public_prefix")
    def _public_prefix(self):
        return url_path_join(os.environ.get("JUPYTERHUB_BASE_URL", "/"), "services", self.service_name, "/")


class _Base(APIHandler):
    @property
    def client(self) -> ServiceClient:
        return self.settings["computehub_client"]

    def fail(self, e: UpstreamError) -> None:
        self.set_status(e.status)
        self.finish(json.dumps({"error": e.code, "message": e.message}))

    async def forward(self, wid: str, action: str, valid, expected: str, method: str = "POST",
                      query: dict | None = None) -> None:
        """``POST workloads/{wid}/{action}`` (``action`` "": the workload itself) on the service with
        this request's JSON body, if ``valid(body)``; else 400 saying what to send (``expected``)."""
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or not valid(body):
            self.set_status(400)
            return self.finish(json.dumps({"error": "invalid", "message": f"send {expected}"}))
        try:
            path = f"workloads/{quote(wid, safe='')}" + (f"/{action}" if action else "")
            out = await self.client.call(method, path, query=query, body=body)
        except UpstreamError as e:
            return self.fail(e)
        self.finish(json.dumps(out))


class WorkloadsHandler(_Base):
    @web.authenticated
    async def get(self):
        try:
            report = await self.client.my_workloads()
        except UpstreamError as e:
            return self.fail(e)
        report["this_workload"] = os.environ.get("COMPUTEHUB_WORKLOAD_ID") or None
        # The panel counts "saved 4 min ago" on this clock, not the browser's, which may be off.
        report["now"] = time.time()
        self.finish(json.dumps(report))


class WorkloadHandler(_Base):
    @web.authenticated
    async def delete(self, wid):
        try:
            w = await self.client.call("DELETE", f"workloads/{quote(wid, safe='')}")
        except UpstreamError as e:
            return self.fail(e)
        self.finish(json.dumps(w))

    @web.authenticated
    async def patch(self, wid):
        """``{"resources": {"gpu": N, "cpu": C, "memory": M}, "time_limit": S, "queue": Q, "name": N}``,
        any of them: the panel's Change… form; ``?dry_run=true`` only asks where it would stand,
        ``?tasks=all`` changes every waiting task of its job array (``&state=held``: the row's, those
        held; the service checks the rest, as for the CLI)."""
        dry, tasks = self.get_query_argument("dry_run", "false"), self.get_query_argument("tasks", "one")
        if dry not in ("true", "false") or tasks not in ("one", "all"):
            self.set_status(400)
            return self.finish(json.dumps({"error": "invalid", "message": "dry_run is true or false, tasks one "
                                                                          "or all"}))
        query = {k: v for k, v in (("dry_run", dry), ("tasks", tasks), ("state", self.get_query_argument("state", "")))
                 if v not in ("false", "one", "")}
        await self.forward(wid, "", lambda body: bool(body) and not set(body) - PANEL_CHANGES,
                           "any of " + ", ".join(sorted(PANEL_CHANGES)), method="PATCH", query=query or None)


class HoldHandler(_Base):
    @web.authenticated
    async def post(self, wid, action):
        try:
            w = await self.client.call("POST", f"workloads/{quote(wid, safe='')}/{action}", body={})
        except UpstreamError as e:
            return self.fail(e)
        self.finish(json.dumps(w))


class MailHandler(_Base):
    """``{"mail": ["end"]}``: what one of my live workloads mails me about (the service checks it)."""

    @web.authenticated
    async def post(self, wid):
        await self.forward(wid, "mail", lambda body: set(body) == {"mail"}, '{"mail": [...]}')


class ArrayActionHandler(_Base):
    """``{"action": "cancel" | "hold" | "release", "states": [...]}``: the tasks of the job array a
    panel row stands for, in one request (the service checks the rest, as it does for the CLI)."""

    @web.authenticated
    async def post(self, wid):
        await self.forward(wid, "array-action", lambda body: body.get("action") in ("cancel", "hold", "release")
                           and not set(body) - {"action", "states"},
                           '{"action": "cancel", "hold" or "release", "states": [...]}')


class LogsHandler(_Base):
    def _invalid(self, message: str):
        self.set_status(400)
        return self.finish(json.dumps({"error": "invalid", "message": message}))

    @web.authenticated
    async def get(self, wid):
        after = self.get_query_argument("after", None)
        tail = self.get_query_argument("tail", "200")
        if after is not None:
            if not after.isdigit():
                return self._invalid("after must be a byte offset (a whole number 0 or more)")
            query = {"after": after}
        elif not tail.isdigit() or not 1 <= int(tail) <= 100_000:
            return self._invalid("tail must be a whole number 1..100000")
        else:
            query = {"tail": tail}
        try:
            logs = await self.client.call("GET", f"workloads/{quote(wid, safe='')}/logs", query)
        except UpstreamError as e:
            return self.fail(e)
        self.finish(json.dumps(logs))


class GPUHandler(APIHandler):
    @web.authenticated
    async def get(self):
        reader: GPUReader = self.settings["computehub_gpu"]
        # NVML calls block (milliseconds, more on a busy driver): off the event loop.
        self.finish(json.dumps(await asyncio.get_running_loop().run_in_executor(None, reader.read)))


def load(serverapp) -> None:
    cfg = ComputeHubLab(parent=serverapp)
    web_app = serverapp.web_app
    web_app.settings["computehub_client"] = ServiceClient(cfg.service_url, cfg.api_token, cfg.request_timeout,
                                                          cfg.public_prefix)
    web_app.settings["computehub_gpu"] = GPUReader(cfg.gpu_history, cfg.gpu_sample_gap)
    base = url_path_join(web_app.settings["base_url"], "computehub")
    wid = r"(?P<wid>[^/]+)"
    web_app.add_handlers(".*$", [
        (url_path_join(base, "workloads"), WorkloadsHandler),
        (url_path_join(base, "workloads", wid), WorkloadHandler),
        (url_path_join(base, "workloads", wid, "logs"), LogsHandler),
        (url_path_join(base, "workloads", wid, "(?P<action>hold|release|top)"), HoldHandler),
        (url_path_join(base, "workloads", wid, "array-action"), ArrayActionHandler),
        (url_path_join(base, "workloads", wid, "mail"), MailHandler),
        (url_path_join(base, "gpu"), GPUHandler),
    ])
    serverapp.log.info("ComputeHub lab extension: service %s", cfg.service_url or "(not configured)")
