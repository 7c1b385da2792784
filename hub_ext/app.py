"""``computehub serve``: the scheduler as a JupyterHub service.

Run by the hub as a managed service (one machine) or next to it as an external
service (Kubernetes). It owns the scheduler, serves the REST API, the event
stream, metrics and admin pages under the service prefix, and runs the
scheduling loop: shortly after every change and every ``cycle_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import sys
from urllib.parse import urlparse

from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import Bool, Dict, Float, List, TraitError, Unicode, default, validate
from traitlets.config import Application

from jupyterhub.services.auth import HubOAuthCallbackHandler
from scheduler import EngineConfig, Scheduler, StoreUnavailable

from . import api_admin as A
from . import api_arrays as AR
from . import api_holds as H
from . import api_status as S
from . import api_workloads as W
from . import usage as U
from .audit import AuditEmitter
from .deadlines import Deadlines
from .cycles import SchedulingLoop
from .estimates import Estimates
from .api_serve import ServeHandler
from .app_config import ServiceConfig
from .group_commit import GroupCommit
from .metrics import Metrics, MetricsHandler
from .openapi import OpenAPIHandler
from .pages import page_handlers
from .report_tokens import ReportTokens, load_secret
from .snapshot import snapshot
from .stream import EventsHandler
from .housekeeping import Housekeeping
from .mail import Mail
from .submission_rules import SubmissionRules

VERSION = "0.1.0"


class ComputeHubService(ServiceConfig, SchedulingLoop, SubmissionRules, Housekeeping, Mail, Deadlines,
                        Application):
    name = "computehub-serve"
    description = "The ComputeHub scheduler as a JupyterHub service."
    classes = [EngineConfig]
    aliases = {"config": "ComputeHubService.config_file", "db-url": "ComputeHubService.db_url",
               "data-dir": "ComputeHubService.data_dir", "url": "ComputeHubService.url"}

    config_file = Unicode("computehub_config.py", config=True,
                          help="Config file to load: Python, or JSON when it ends in .json. The default "
                               "may be missing; a file named with --config must exist and load.")
    data_dir = Unicode(config=True, help="Folder for the SQLite database, logs and the cookie secret.")
    db_url = Unicode(config=True,
                     help="SQLAlchemy URL of the database: sqlite:///path (default, under data_dir) or "
                          "postgresql+psycopg://user@host/db for production.")
    url = Unicode(config=True, help="Where to listen, e.g. http://127.0.0.1:10101 "
                                    "(default: $JUPYTERHUB_SERVICE_URL, set by the hub for managed services).")
    service_prefix = Unicode(config=True, help="URL prefix of the service (default: $JUPYTERHUB_SERVICE_PREFIX).")
    estimate_reuse = Float(10.0, config=True, help=(
        "A waiting workload's explanation (its start estimate, a simulation of the line ahead) is made "
        "again on the next cycle, or, if it took long to make, once this many times as long as it took "
        "has passed: an estimate of 9 s (held work behind a line of 15,000) is redone every 90 s, not "
        "every cycle. The line plan that explains all waiting work at once is kept the same way, and made "
        "again in the background once half of that has passed. A multiple of the time it took; 0 = every "
        "cycle."))
    long_poll_max = Float(30.0, config=True,
                          help="Longest a GET workloads/{id}?wait=S holds its answer, in seconds (at most "
                               "30); a longer wait is cut to this. Each held request is one open connection.")

    _BOUNDS = {"cycle_max_busy": (1, "a share between 0 and 1 (e.g. 0.1)"),
               "long_poll_max": (30, "between 0 and 30 seconds")}

    @validate(*_BOUNDS)
    def _bounded(self, proposal):
        name = proposal.trait.name
        high, what = self._BOUNDS[name]
        if not 0 < proposal.value <= high:
            raise TraitError(f"ComputeHubService.{name} must be {what}, not {proposal.value}")
        return proposal.value

    write_on_thread = Bool(False, config=True,
                           help="Write batches of submissions to the database on a writer thread, so "
                                "the event loop serves other requests while a commit waits for the disk "
                                "(submissions arriving meanwhile form the next batch). Off by default: on "
                                "SQLite with a fast disk it measured no better (the writer's Python work "
                                "competes with the loop for the GIL); try it where commits are slow.")
    prices = Dict(config=True, help="Price per GPU-hour by GPU flavor (e.g. {'a100': 3.0}); "
                                    "'any' prices GPUs of no stated model.")
    allowed_node_selectors = List(Unicode(), config=True,
                                  help="Node labels that users may set in node_selector: a key ('zone', any "
                                       "value) or key=value ('zone=east', that value only). Anything else "
                                       "is refused unless the caller may submit on behalf of users.")
    authenticate_metrics = Bool(True, config=True,
                                help="Require the hub's read:metrics scope (or admin) for /metrics.")
    nodes = List(Dict(), config=True,
                 help="Nodes registered (created or updated) at start, e.g. from an inventory source.")
    initial_queues = List(Dict(), config=True,
                          help="Queues created at start when the database has none (later edits are kept).")
    audit_log_file = Unicode("", config=True, help="File to append jupyter_events audit records to ('' = off).")
    other_service_wait = Float(0.0, config=True,
                               help="Seconds to wait at start while another ComputeHub service holds the "
                                    "database (one service per database), before refusing to start; 0 "
                                    "refuses at once. For a replacement started while the service it "
                                    "replaces is still stopping.")
    database_timeout = Float(15.0, config=True,
                             help="Seconds one call to PostgreSQL may take before the service breaks it "
                                  "off and answers 503: a server that stops answering without closing "
                                  "its connections would otherwise hold the whole service. Until the "
                                  "server answers again (tried every second in the background) calls "
                                  "fail at once. 0 waits for as long as the connection lasts. Not used "
                                  "with SQLite, which waits at most 30 s for another writer's lock.")

    @default("data_dir")
    def _data_dir(self):
        return os.environ.get("COMPUTEHUB_DATA_DIR", os.path.abspath("computehub-data"))

    @default("db_url")
    def _db_url(self):
        return "sqlite:///" + os.path.join(self.data_dir, "computehub.sqlite")

    @default("url")
    def _url(self):
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("service_prefix")
    def _prefix(self):
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/computehub/")

    # --- set-up ------------------------------------------------------------------

    def initialize(self, argv=None):
        # Every setting is checked before anything is written or served (app_config.py).
        self.parse_command_line(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
        self.check_config_sections()
        self.engine_config = EngineConfig(parent=self)
        self.prepare_dirs()
        self.logs_dir = os.path.join(self.data_dir, "logs")
        self.version = VERSION
        self.stopping = False
        self.exit_status = 0
        store = self.open_store()
        with store.unbounded():     # nothing waits on the loop yet: a large state may take its time
            self.sched = Scheduler(store, self.engine_config, prices=dict(self.prices))
            self.sched.max_waiting_per_user = self.max_waiting_per_user
            try:
                store.refresh_statistics()            # a long history is read by index from the start
            except StoreUnavailable as e:             # e.g. a full disk: reads are slower, nothing is wrong
                self.log.warning("planner statistics not refreshed: %s", e.detail)
            self.apply_start_config()
        self.report_tokens = ReportTokens(load_secret(self.sched.store))
        self.metrics = Metrics(self)
        handlers = []
        if self.audit_log_file:
            handlers.append(logging.FileHandler(self.audit_log_file))
        self.audit = AuditEmitter(handlers)
        self.audit.start_after(self.sched.store.last_event_id())
        self.positions: dict[str, tuple[int, int]] = {}      # the last cycle's: id -> (in line, in its queue)
        self.line_lengths: tuple[int, dict[str, int]] = (0, {})     # and how long the line, each queue's
        self.line_order: list[str] = []                             # and the line, first first
        self.next_begin: float | None = None                        # and the earliest begin time held
        self.cycles = 0
        self._last_cycle = 0.0
        self._last_cycle_at = 0.0           # the last cycle's time (time.time)
        self._last_cycle_seconds = 0.0
        self._db_down = False
        self.estimates = Estimates(self)
        self.dry_runs: dict[str, float] = {}     # caller -> when their last dry run began (api_workloads.py)
        self._group_commit = GroupCommit(self)
        self._groups: dict[str, tuple[float, set[str]]] = {}
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()

    def path(self, path: str = "") -> str:
        return self.service_prefix.rstrip("/") + "/" + path.lstrip("/")

    def make_app(self) -> web.Application:
        p = self.service_prefix.rstrip("/")
        api = p + "/api/v1"
        wid = r"(?P<workload_id>[^/]+)"
        name = r"(?P<name>[^/]+)"
        handlers = [
            (api + r"/me", A.MeHandler),
            (api + r"/me/mail-address", A.MeMailAddressHandler),
            (api + r"/me/mail-address/confirm", A.MeMailAddressConfirmHandler),
            (api + r"/workloads", W.WorkloadsHandler),
            (api + r"/workloads/status", S.StatusBatchHandler),
            (api + rf"/workloads/{wid}", W.WorkloadHandler),
            (api + rf"/workloads/{wid}/logs", W.WorkloadLogsHandler),
            (api + rf"/workloads/{wid}/status", S.WorkloadStatusHandler),
            (api + rf"/workloads/{wid}/checkpoint", S.WorkloadCheckpointHandler),
            (api + rf"/workloads/{wid}/hold", H.WorkloadHoldHandler),
            (api + rf"/workloads/{wid}/array-limit", AR.ArrayLimitHandler),
            (api + rf"/workloads/{wid}/array-action", AR.ArrayActionHandler),
            (api + rf"/workloads/{wid}/release", H.WorkloadReleaseHandler),
            (api + rf"/workloads/{wid}/top", H.WorkloadTopHandler),
            (api + rf"/workloads/{wid}/mail", H.WorkloadMailHandler),
            (api + r"/queues", A.QueuesHandler),
            (api + rf"/queues/{name}", A.QueueHandler),
            (api + r"/classes", A.ClassesHandler),
            (api + rf"/classes/{name}", A.ClassHandler),
            (api + r"/nodes", A.NodesHandler),
            (api + rf"/nodes/{name}", A.NodeHandler),
            (api + r"/usage", U.UsageHandler),
            (api + r"/approvals", A.ApprovalsHandler),
            (api + rf"/approvals/{wid}", A.ApprovalHandler),
            (api + r"/audit", A.AuditHandler),
            (api + r"/events", EventsHandler),
            (api + r"/openapi.json", OpenAPIHandler),
            (p + rf"/serve/{wid}/(?P<path>.*)", ServeHandler),
            (p + r"/metrics", MetricsHandler),
            (p + r"/oauth_callback", HubOAuthCallbackHandler),
        ] + page_handlers(p)
        return web.Application(handlers, computehub=self, xsrf_cookies=True, cookie_secret=self._cookie_secret(),
                               template_path=os.path.join(os.path.dirname(__file__), "templates"),
                               static_path=os.path.join(os.path.dirname(__file__), "static"),
                               static_url_prefix=p + "/static/", default_handler_class=NotFoundHandler,
                               default_handler_args={})

    def _cookie_secret(self) -> bytes:
        path = os.path.join(self.data_dir, "cookie_secret")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        with open(path) as f:
            return f.read().strip().encode()

    # --- what handlers use ----------------------------------------------------------

    async def submit(self, spec: dict):
        """Accept a submission (see group_commit.py: it is written with those that arrive
        while the batch before is being written)."""
        return await self._group_commit.submit(spec)

    def changed(self) -> None:
        """Something changed: wake the scheduling loop and the event streams."""
        self._wake.set()
        self._notify()

    def _notify(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    def next_change(self):
        return asyncio.ensure_future(self._changed.wait())

    async def explanation(self, w) -> dict:
        """Explanations are simulations: made at most once per cycle per workload, off the
        event loop (estimates.py)."""
        return await self.estimates.explanation(w)

    async def snapshot_for(self, caller, user: str | None = None) -> list[dict]:
        return await snapshot(self, user or caller.name)

    # --- the scheduling loop ----------------------------------------------------------

    # --- run -------------------------------------------------------------------------

    def start(self):
        asyncio.run(self._serve())
        if self.exit_status:
            sys.exit(self.exit_status)

    async def _serve(self):
        u = urlparse(self.url)
        server = HTTPServer(self.make_app(), xheaders=True)
        server.listen(u.port or 80, u.hostname or "127.0.0.1")
        self.log.info("ComputeHub %s listening on %s%s", VERSION, self.url, self.service_prefix)
        self._stop = stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        tasks = [asyncio.create_task(self.scheduling_loop()), asyncio.create_task(self.housekeeping_loop()),
                 asyncio.create_task(self.mail_loop())]
        self.changed()
        await stop.wait()
        self.log.info("ComputeHub shutting down")
        self.stopping = True
        self._notify()
        server.stop()
        for task in tasks:
            task.cancel()
        self.estimates.close()
        self.sched.store.close()


class NotFoundHandler(web.RequestHandler):
    def prepare(self):
        self.set_status(404)
        self.set_header("Content-Type", "application/json")
        self.finish('{"error": "not_found", "message": "no such route"}')


def main(argv=None):
    from scheduler.config_checks import launch
    launch(ComputeHubService, argv)
