"""The queueing layer shared by ComputeHub's spawners (see docs/spawner.md).

``start()`` submits a ``notebook`` workload on the user's behalf, waits for the
scheduler to admit it (``progress()`` says where the user stands meanwhile),
then starts the real server with its placement. ``stop()`` and ``poll()``
report back so the GPUs return at once. Everything goes through the REST API.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

from jupyterhub.spawner import Spawner
from traitlets import Float, Integer, Unicode, default, validate

from .service_client import ServiceClient, ServiceError
from .wording import eta_text

WAITING = ("pending", "awaiting_approval")
ADMITTED = ("admitted", "running")
NO_LIMIT = 30 * 24 * 3600   # "wait in the queue as long as it takes" (asyncio needs a number)


class ServerFailed(Exception):
    """The admitted server cannot start, for ``reason`` (its image cannot be pulled, its pod was
    evicted or never scheduled). ``node_lost``: the cluster's doing, not the user's: the service
    requeues the workload if its class requeues, and the spawn waits in the queue again."""

    def __init__(self, reason: str, node_lost: bool = False, exit_code: int = 1):
        super().__init__(reason)
        self.reason, self.node_lost, self.exit_code = reason, node_lost, exit_code


def queue_message(w: dict) -> str:
    """What the spawn page says about a workload that is not admitted yet."""
    ex = w.get("explanation") or {}
    reason = ex.get("reason") or w.get("reason") or "waiting for the scheduler"
    if w.get("state") == "awaiting_approval":
        return f"Waiting for an admin's approval in {w.get('queue')} — {reason}"
    pos = ex.get("position_in_queue", w.get("position_in_queue"))
    where = f"position {pos} in {w.get('queue')}" if pos else f"in {w.get('queue')}"
    return f"Queued: {where}, {eta_text(ex.get('eta_seconds'), ex.get('eta_earliest', False))} — {reason}"


class QueueingMixin(Spawner):
    """Mix in before a concrete spawner: ``class S(QueueingMixin, LocalProcessSpawner)``."""

    computehub_url = Unicode(config=True, help="""URL of the ComputeHub service (…/services/computehub).
        Default: $COMPUTEHUB_URL, else the hub's registered 'computehub' service.""")
    computehub_token = Unicode(config=True, help="""API token with custom:computehub:submit-on-behalf.
        Default: $COMPUTEHUB_TOKEN.""")
    computehub_service_name = Unicode("computehub", config=True,
                                      help="Name of the ComputeHub service in the hub's services.")
    computehub_queue = Unicode("", config=True, help="Queue to submit to ('' = the service picks one "
                                                     "open to the user's groups).")
    gpus = Integer(0, min=0, config=True, help="GPUs the server asks for.")
    gpu_model = Unicode("", config=True, help="GPU model (flavor) wanted, e.g. 'a100'; '' = any.")
    queue_poll_interval = Float(1.0, config=True, help="Seconds between queue checks (at most 2).")
    queue_timeout = Float(0.0, config=True, help="""Longest time a spawn waits in the queue, in seconds;
        0 = as long as it takes. start_timeout then applies to starting the server alone.""")

    concurrent_start_limit = Integer(20, min=0, config=True, help="""Most servers of this hub starting at
        once after admission (0 = no limit). It replaces JupyterHub's concurrent_spawn_limit, which would count
        users waiting in the queue and turn them away (configure_jupyterhub moves it here).""")

    workload_id = Unicode("")            # persisted in the spawner state
    _start_slots: dict = {}               # limit -> asyncio.Semaphore, shared by all spawners of the hub
    _launched = False                     # the real server was started for this workload
    _stopping = False
    _polling = False                      # inside the underlying poll (which may stop a dead server itself)
    _event: dict | None = None
    _admitted_w: dict | None = None

    @validate("queue_poll_interval")
    def _poll_interval(self, proposal):
        return min(2.0, max(0.05, proposal["value"]))

    @default("computehub_url")
    def _default_url(self):
        if os.environ.get("COMPUTEHUB_URL"):
            return os.environ["COMPUTEHUB_URL"]
        services = getattr(self.user, "settings", {}).get("services", {}) if self.user else {}
        svc = services.get(self.computehub_service_name)
        if svc is not None and getattr(svc, "url", None):
            return svc.url.rstrip("/") + svc.prefix.rstrip("/")
        return ""

    @default("computehub_token")
    def _default_token(self):
        return os.environ.get("COMPUTEHUB_TOKEN", "")

    # ---- state (a hub restart recovers the workload) -------------------------------
    def load_state(self, state):
        super().load_state(state)
        self.workload_id = state.get("computehub_workload", "")
        self._launched = bool(state.get("computehub_launched"))

    def get_state(self):
        state = super().get_state()
        if self.workload_id:
            state["computehub_workload"] = self.workload_id
            state["computehub_launched"] = self._launched
        return state

    def clear_state(self):
        super().clear_state()
        self.workload_id, self._launched, self._admitted_w = "", False, None

    # ---- what the workload asks for ----------------------------------------------
    def requested_gpus(self) -> int:
        """The configured GPUs, or fewer where the start asks for it (``computehub_gpus`` in the
        user options: the reclaimer restarts an idle notebook with 0). Never more."""
        asked = (self.user_options or {}).get("computehub_gpus")
        if asked is None:
            return int(self.gpus)
        if isinstance(asked, bool) or not isinstance(asked, int) or not 0 <= asked <= self.gpus:
            raise ValueError(f"computehub_gpus must be a whole number from 0 to {self.gpus}")
        return asked

    def workload_spec(self) -> dict:
        resources = {"gpu": self.requested_gpus()}
        if self.cpu_limit:
            resources["cpu"] = float(self.cpu_limit)
        if self.mem_limit:
            resources["memory"] = int(self.mem_limit)
        spec = {"kind": "notebook", "user": self.user.name, "name": self.name or "default",
                "resources": resources, "metadata": {"spawner": type(self).__name__}}
        if self.computehub_queue:
            spec["queue"] = self.computehub_queue
        if self.gpu_model:
            spec["gpu_model"] = self.gpu_model
        return spec

    def client(self) -> ServiceClient:
        if not self.computehub_url or not self.computehub_token:
            raise RuntimeError("ComputeHub spawner needs computehub_url and computehub_token "
                               "(a token with custom:computehub:submit-on-behalf)")
        return ServiceClient(self.computehub_url, self.computehub_token)

    def assigned_gpus(self) -> list[int]:
        return [g for a in (self._admitted_w or {}).get("placement", []) for g in a.get("gpus", [])]

    def get_env(self):
        env = super().get_env()
        env["COMPUTEHUB_URL"] = self.computehub_url
        if self.workload_id:
            env["COMPUTEHUB_WORKLOAD_ID"] = self.workload_id
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.assigned_gpus())
        # The indices are NVML's, in PCI bus order; CUDA's own default (fastest first) would
        # number a machine of mixed GPUs differently and hand the server another one's GPU.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if not self.assigned_gpus():
            # In a container: CUDA images set NVIDIA_VISIBLE_DEVICES=all, and on a node whose default
            # runtime is NVIDIA's a pod that got no GPU would see every one. With GPUs the device
            # plugin sets it (a pod's own value would override the plugin's). An admin's value stays.
            env.setdefault("NVIDIA_VISIBLE_DEVICES", "void")
        return env

    # ---- start: queue, then the real server --------------------------------------
    def start(self):
        """Not a coroutine on purpose: JupyterHub reads ``start_timeout`` right after calling
        ``start()`` to bound the whole start. Queue time must not count against it, so the
        bound becomes queue_timeout + start_timeout, and start_timeout is applied to the
        server's own start after admission."""
        server_timeout = self.start_timeout
        self.start_timeout = int((self.queue_timeout or NO_LIMIT) + server_timeout)
        task = asyncio.ensure_future(self._queued_start(server_timeout))
        # however the start ends (even cancelled before it ran), the trait is put back
        task.add_done_callback(lambda _: setattr(self, "start_timeout", server_timeout))
        return task

    def check_can_start(self) -> None:
        """Raise (the hub shows the message) when this user's server must not start at all,
        before anything is queued. Nothing to check here; subclasses add their rules."""

    async def _queued_start(self, server_timeout: float):
        self.check_can_start()
        client = self.client()
        self._event, self._admitted_w, self._launched = None, None, False
        t0 = time.perf_counter()
        try:
            w = await self._submit_or_resume(client)
            while True:
                w = await self._wait_for_admission(client, w)
                queued_s = time.perf_counter() - t0
                self._admitted_w = w
                where = ", ".join(f"{a['node']} GPU {','.join(map(str, a['gpus'])) or '-'}" for a in w["placement"])
                self._event = {"progress": 50, "message": f"Admitted: {where or 'no GPU'}; starting server"}
                self.start_timeout = server_timeout
                try:
                    async with self._start_slot():
                        url = await asyncio.wait_for(self._start_server(), server_timeout)
                except ServerFailed as e:
                    w = await self._start_failed(client, e)      # requeued: wait again (else it raises)
                    continue
                break
            self._launched = True
        except BaseException:
            self.start_timeout = server_timeout
            await self._withdraw(client)
            raise
        t1 = time.perf_counter()
        try:
            await client.report(self.workload_id, "running")
        except ServiceError as e:
            self.log.warning("ComputeHub: could not report %s running: %s", self.workload_id, e)
        # what the queue added to this spawn (bench/spawn_queue.py reads this line)
        self.log.info("ComputeHub: %s queue time %.1f ms (to admission %.1f ms, running report %.1f ms)",
                      self._log_name, (queued_s + time.perf_counter() - t1) * 1000, queued_s * 1000,
                      (time.perf_counter() - t1) * 1000)
        return url

    async def _start_server(self):
        """The underlying spawner's start (a subclass may watch it and raise ``ServerFailed``)."""
        return await super().start()

    async def _start_failed(self, client: ServiceClient, e: ServerFailed) -> dict:
        """Report the admitted workload failed with the reason (its GPUs return at once). Requeued
        by the service (``node_lost`` and a class that requeues): the workload, to wait for again;
        else the spawn fails with the reason, which the spawn page shows."""
        self.log.warning("ComputeHub: %s could not start: %s", self._log_name, e.reason)
        extra = {"node_lost": True} if e.node_lost else {}
        try:
            w = await client.report(self.workload_id, "failed", exit_code=e.exit_code, reason=e.reason[:2000],
                                    **extra)
        except ServiceError as err:
            self.log.warning("ComputeHub: could not report %s failed: %s", self.workload_id, err)
            w = {}
        if w.get("state") in WAITING:
            self._event = {"progress": 10, "message": f"Requeued: {e.reason}"}
            return w
        if w:
            self.workload_id = ""           # it ended: nothing to withdraw
        err = RuntimeError(f"The server could not start: {e.reason}")
        err.jupyterhub_message = str(err)   # what the spawn page and the hub's REST API show
        raise err from None

    def _start_slot(self):
        limit = self.concurrent_start_limit
        if not limit:
            return contextlib.nullcontext()
        slots = QueueingMixin._start_slots
        if limit not in slots:
            slots[limit] = asyncio.Semaphore(limit)
        return slots[limit]

    async def _submit_or_resume(self, client: ServiceClient) -> dict:
        if self.workload_id:                 # recovered from state (hub restart) or a retried start
            try:
                w = await client.get(self.workload_id)
                if w["state"] in WAITING or w["state"] == "admitted":
                    self.log.info("ComputeHub: %s resumes workload %s", self._log_name, self.workload_id)
                    return w
                if w["state"] == "running":
                    await client.report(self.workload_id, "finished", reason="superseded by a new spawn")
            except ServiceError as e:
                self.log.warning("ComputeHub: old workload %s: %s", self.workload_id, e)
            self.workload_id = ""
        spec = self.workload_spec()
        if "queue" not in spec:
            queue = await self._queue_for_user(client)
            if queue:
                spec["queue"] = queue
        w = await client.submit(spec)
        self.workload_id = w["id"]
        self.log.info("ComputeHub: %s submitted workload %s (%s)", self._log_name, w["id"], w["state"])
        return w

    async def _queue_for_user(self, client: ServiceClient) -> str | None:
        """The first leaf queue open to one of the user's hub groups (what the service picks
        for a user submitting for themselves; a spawner submits for them, so it asks)."""
        groups = {g.name for g in getattr(self.user, "groups", [])}
        try:
            queues = (await client.request("GET", "queues")).get("queues", [])
        except ServiceError as e:
            self.log.warning("ComputeHub: could not list queues: %s", e)
            return None
        mine = sorted(q["name"] for q in queues if q.get("leaf") and set(q.get("groups") or ()) & groups)
        return mine[0] if mine else None

    async def _wait_for_admission(self, client: ServiceClient, w: dict) -> dict:
        """Wait for admission with the service's long poll: the answer comes as soon as the
        state changes (a free GPU is admitted within the service's next cycle, milliseconds)
        and at least every queue_poll_interval, so position and reason stay fresh."""
        while True:
            state = w["state"]
            if state in ADMITTED:
                return w
            if state not in WAITING:
                raise RuntimeError(f"ComputeHub did not admit the server: {state} — {w.get('reason') or ''}")
            msg = queue_message(w)
            if self._event is None or self._event["message"] != msg:
                self._event = {"progress": 10, "message": msg}
                self.log.info("ComputeHub: %s %s", self._log_name, msg)
            w = await client.get(self.workload_id, wait=self.queue_poll_interval, state=state)

    async def _withdraw(self, client: ServiceClient | None = None):
        """Cancel a workload whose server never started (a cancelled or failed spawn)."""
        wid = self.workload_id
        if not wid or self._launched:
            return
        try:
            await (client or self.client()).cancel(wid)
            self.log.info("ComputeHub: withdrew workload %s of %s", wid, self._log_name)
        except (ServiceError, RuntimeError) as e:
            if getattr(e, "status", 0) not in (404, 409):     # already ended: fine
                self.log.warning("ComputeHub: could not withdraw %s: %s", wid, e)
        self.workload_id = ""

    async def progress(self):
        """Queue position, ETA and reason while queued (checked every 0.25 s), then the
        underlying spawner's own progress."""
        last = None
        while self._admitted_w is None:
            ev = self._event
            if ev is not None and ev != last:
                last = ev
                yield dict(ev)
            await asyncio.sleep(0.25)
        if self._event is not None and self._event != last:
            yield dict(self._event)
        async for ev in super().progress():
            yield ev

    # ---- stop and poll: the GPUs return -------------------------------------------
    async def _report_end(self, status: int | None, reason: str = "", node_lost: bool = False):
        wid, launched = self.workload_id, self._launched
        if not wid:
            return
        if not launched:
            await self._withdraw()
            return
        code = 0 if status in (None, 0) else int(status) if isinstance(status, int) else 1
        try:
            extra = {"node_lost": True} if node_lost and code else {}
            await self.client().report(wid, "finished" if code == 0 else "failed", exit_code=code,
                                       reason=reason or f"server ended (exit code {code})", **extra)
        except (ServiceError, RuntimeError) as e:
            if getattr(e, "status", 0) not in (404, 409):
                self.log.warning("ComputeHub: could not report %s ended: %s", wid, e)
        self.workload_id, self._launched = "", False

    async def poll(self):
        """A dead server is reported at once (finished on exit 0, else failed), with why it
        ended where the spawner can tell (``ended_why``)."""
        wid, launched = self.workload_id, self._launched
        why = self.ended_why() if wid and launched and not self._stopping else None
        self._polling = True
        try:
            status = await super().poll()
        finally:
            self._polling = False
        if status is not None and wid and launched and not self._stopping:
            self.workload_id, self._launched = wid, True     # super().poll() may clear state
            reason, lost = why or (f"server exited (status {status})", False)
            await self._report_end(status, reason, node_lost=lost)
        return status

    def ended_why(self) -> tuple[str, bool] | None:
        """(reason, node_lost) of a server that is ending, read before the underlying spawner's
        poll cleans up; None: it runs, or nothing more is known than its exit status."""
        return None

    async def stop(self, now=False):
        """Stop the server, then release the allocation (finished), or withdraw a queued one.
        A stop the underlying poll makes of a dead server (KubeSpawner deletes its pod) reports
        nothing: ``poll`` reports how it ended."""
        if self._polling:
            await super().stop(now=now)
            return
        wid, launched = self.workload_id, self._launched
        self._stopping = True
        try:
            await super().stop(now=now)
        finally:
            self._stopping = False
            if wid:
                self.workload_id, self._launched = wid, launched   # super() may have cleared state
                await self._report_end(None, "server stopped")
