"""``computehub-notebook-watch``: a small hub service that keeps notebook workloads honest.

Like jupyterhub-idle-culler it runs next to the hub with its own token and
talks to the hub's REST API and ComputeHub's. Every ``interval`` seconds it

* reclaims idle GPU notebooks: a server's idle time starts at the later of its
  hub ``last_activity`` (kernels, terminals, browser) and the last moment one
  of its GPUs was busy (NVML, where this process can see the GPUs). It reports
  that to the service, whose queue policy answers warn (the user sees a
  message on the workload) or release (the GPUs return and the reclaim is
  audited with the GPU-hours it gave back); on release this watcher stops the
  server, or restarts it without GPUs where configured;
* reconciles: a notebook workload whose server no longer exists in the hub
  (a spawn lost in a hub restart, a server removed behind the hub's back) for
  longer than ``orphan_grace`` is withdrawn, so no queue entry or GPU leaks.

See docs/spawner.md ("Idle reclamation" and "Hub restarts").
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import datetime
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Bool, Float, Unicode, default, validate
from traitlets.config import Application

from . import gpu_usage
from scheduler.config_checks import ConfigError, StrictConfig, check_number, check_url, launch, recheck
from .service_client import ServiceClient, ServiceError

LIVE = ("pending", "awaiting_approval", "admitted", "running", "reclaiming")


def parse_time(s: str | None) -> float | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def server_key(user: str, name: str) -> tuple[str, str]:
    """Workloads name the default server 'default'; the hub names it ''."""
    return user, "" if name in ("", "default") else name


class NotebookWatch(StrictConfig, Application):
    name = "computehub-notebook-watch"
    description = "Reclaim idle GPU notebooks and withdraw notebook workloads whose server is gone."

    hub_api_url = Unicode(config=True, help="The hub's REST API (default: $JUPYTERHUB_API_URL).")
    api_token = Unicode(config=True, help="Hub token with list:users, read:users:name, read:users:activity, "
                                          "read:servers, delete:servers and servers, plus ComputeHub's "
                                          "submit-on-behalf "
                                          "(default: $JUPYTERHUB_API_TOKEN).")
    computehub_url = Unicode(config=True, help="ComputeHub's URL (…/services/computehub); default "
                                               "$COMPUTEHUB_URL.")
    interval = Float(30.0, config=True, help="Seconds between passes.")
    orphan_grace = Float(120.0, config=True,
                         help="Seconds a notebook workload may exist without a server in the hub before it is "
                              "withdrawn (covers the moment between a spawn's submission and the hub noting it).")
    gpu_busy_percent = Float(5.0, config=True,
                             help="GPU utilisation (percent) above which a notebook counts as active.")
    restart_without_gpu = Bool(False, config=True,
                               help="After reclaiming a notebook's GPUs, start the server again without GPUs "
                                    "(its files stay; running kernels are lost) instead of leaving it stopped.")

    @default("hub_api_url")
    def _hub_api(self):
        return os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")

    @default("api_token")
    def _token(self):
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @default("computehub_url")
    def _chub(self):
        return os.environ.get("COMPUTEHUB_URL", "")

    @validate("interval")
    def _interval_ok(self, proposal):
        return check_number("NotebookWatch.interval", proposal.value, low=0, low_open=True, unit="seconds")

    @validate("orphan_grace")
    def _grace_ok(self, proposal):
        return check_number("NotebookWatch.orphan_grace", proposal.value, low=0, unit="seconds")

    @validate("gpu_busy_percent")
    def _percent_ok(self, proposal):
        return check_number("NotebookWatch.gpu_busy_percent", proposal.value, low=0, high=100, unit="percent")

    @validate("hub_api_url", "computehub_url")
    def _urls_ok(self, proposal):
        return check_url(f"NotebookWatch.{proposal.trait.name}", proposal.value, empty_ok=True)

    def initialize(self, argv=None):
        self.parse_command_line(argv)       # StrictConfig: a bad setting stops it here (exit 2)
        recheck(self, ["hub_api_url", "computehub_url"])        # from the environment too
        if not self.computehub_url or not self.api_token:
            raise ConfigError("set $COMPUTEHUB_URL (or NotebookWatch.computehub_url) and a token "
                              "($JUPYTERHUB_API_TOKEN)")
        self.service = ServiceClient(self.computehub_url, self.api_token)
        self.started = time.time()
        self.seen: dict[str, float] = {}        # workload id -> last time its server was in the hub
        self.busy_at: dict[str, float] = {}     # workload id -> last time one of its GPUs was busy
        self.warned: set[str] = set()
        self.tasks: set[asyncio.Task] = set()

    # ---- the hub's REST API ----------------------------------------------------------
    async def hub(self, method: str, path: str, body: dict | None = None):
        req = HTTPRequest(self.hub_api_url.rstrip("/") + path, method=method,
                          headers={"Authorization": f"token {self.api_token}",
                                   "Accept": "application/jupyterhub-pagination+json",
                                   "Content-Type": "application/json"},
                          body=None if body is None else json.dumps(body), allow_nonstandard_methods=True,
                          request_timeout=30)
        resp = await AsyncHTTPClient().fetch(req, raise_error=False)
        if resp.code >= 400 and resp.code != 404:
            raise HTTPClientError(resp.code, resp.body[:300].decode("utf-8", "replace"), resp)
        return resp.code, json.loads(resp.body) if resp.body else None

    async def hub_servers(self) -> dict[tuple[str, str], dict]:
        """(user, server name) -> the hub's server model, for every active (ready or pending) server."""
        servers, offset = {}, 0
        while True:
            _, page = await self.hub("GET", f"/users?state=active&limit=200&offset={offset}")
            items = page["items"] if isinstance(page, dict) else page
            for u in items:
                for name, s in (u.get("servers") or {}).items():
                    servers[(u["name"], name)] = s
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt or not items:
                return servers
            offset = nxt["offset"]

    async def notebooks(self) -> list[dict]:
        q = "&".join(f"state={s}" for s in LIVE)
        return (await self.service.request("GET", f"workloads?kind=notebook&limit=10000&{q}"))["workloads"]

    # ---- one pass ----------------------------------------------------------------------
    async def check(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        servers = await self.hub_servers()
        for w in await self.notebooks():
            server = servers.get(server_key(w["user"], w["name"]))
            if server is not None:
                self.seen[w["id"]] = now
                if w["state"] == "running" and server.get("ready"):
                    await self.check_idle(w, server, now)
            else:
                await self.check_orphan(w, now)

    async def check_orphan(self, w: dict, now: float) -> None:
        last = max(self.seen.get(w["id"], self.started), w.get("submitted_at") or 0)
        if now - last < self.orphan_grace:
            return
        reason = "its server no longer exists in the hub"
        try:
            if w["state"] in ("running", "reclaiming"):
                await self.service.report(w["id"], "finished", reason=reason)
            else:
                await self.service.cancel(w["id"])
            self.log.info("Withdrew notebook workload %s of %s: %s", w["id"], w["user"], reason)
        except ServiceError as e:
            if e.status not in (404, 409):
                self.log.warning("Could not withdraw %s: %s", w["id"], e)
        self.seen.pop(w["id"], None)

    def gpus_busy(self, w: dict) -> bool | None:
        indices = [g for a in w.get("placement", []) for g in a.get("gpus", [])]
        if not indices:
            return None
        util = gpu_usage.utilisation(indices)
        if not util:
            return None
        return max(util.values()) > self.gpu_busy_percent

    async def check_idle(self, w: dict, server: dict, now: float) -> None:
        if self.gpus_busy(w):
            self.busy_at[w["id"]] = now
        marks = [parse_time(server.get("last_activity")), parse_time(server.get("started")),
                 w.get("started_at"), self.busy_at.get(w["id"])]
        idle_since = min(now, max(m for m in marks if m is not None))
        try:
            d = await self.service.report(w["id"], "idle", idle_since=idle_since)
        except ServiceError as e:
            if e.status not in (404, 409):
                self.log.warning("Idle report for %s failed: %s", w["id"], e)
            return
        if d["action"] == "warn":
            minutes = d["idle_seconds"] / 60
            when = datetime.fromtimestamp(d["release_at"]).strftime("%H:%M") if d.get("release_at") else "soon"
            await self._note(w, f"Idle for {minutes:.0f} min: its GPUs will be released at {when} "
                                f"unless it is used")
            self.warned.add(w["id"])
        elif d["action"] == "release":
            self.log.info("Reclaimed %s (%s/%s): %.2f GPU-hours returned", w["id"], w["user"], w["name"],
                          d["gpu_hours_returned"])
            self._spawn(self.stop_server(w["user"], server_key(w["user"], w["name"])[1]))
        elif w["id"] in self.warned and d["idle_seconds"] < (d.get("warn_after") or 0):
            self.warned.discard(w["id"])
            await self._note(w, "")

    async def _note(self, w: dict, message: str) -> None:
        try:
            await self.service.report(w["id"], "update", message=message)
        except ServiceError as e:
            self.log.warning("Could not note on %s: %s", w["id"], e)

    async def stop_server(self, user: str, name: str) -> None:
        path = f"/users/{quote(user)}/servers/{quote(name)}" if name else f"/users/{quote(user)}/server"
        await self.hub("DELETE", path)
        if not self.restart_without_gpu:
            return
        for _ in range(600):                 # wait for the stop to finish, then start without GPUs
            code, u = await self.hub("GET", f"/users/{quote(user)}")
            if code == 404 or name not in (u.get("servers") or {}):
                break
            await asyncio.sleep(0.5)
        await self.hub("POST", path, {"computehub_gpus": 0})

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.warning("Stopping a reclaimed server failed: %s", task.exception())

    # ---- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        while not stop.is_set():
            try:
                await self.check()
            except (ServiceError, HTTPClientError, OSError, KeyError, ValueError) as e:
                self.log.warning("Notebook watch pass failed (will retry): %s", e)
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    def start(self):
        asyncio.run(self.run())


def main(argv=None):
    launch(NotebookWatch, argv)

if __name__ == "__main__":
    main()
