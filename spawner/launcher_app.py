"""``computehub-launcher``: the launcher driver, a small JupyterHub service.

Like jupyterhub-idle-culler it talks to ComputeHub only through the REST API,
with a token holding ``custom:computehub:submit-on-behalf``. It watches admitted
``training`` / ``inference`` / ``batch`` workloads, starts them through a backend
(``spawner.launch_local.LocalLauncher`` by default; see launch_base), and reports:
``running`` (node, endpoint), ``finished`` / ``failed`` (exit code, reason with the
last log lines), ``stopped`` after a preemption (SIGTERM, ``preempt_grace``, kill) or
a cancel (``cancelling``: SIGTERM, ``cancel_grace``, kill; its GPUs return only then).
Crashed inference services restart up to ``max_restarts``. After its own restart
it adopts what still runs and reports what died. See docs/launchers.md.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from traitlets import Bool, Float, Instance, Integer, List, Type, Unicode, default

from scheduler.config_checks import launch, recheck
from .launch_base import Ended, LaunchError, LauncherBackend, StartLater
from .launch_local import LocalLauncher
from .launcher_endings import REASON_MAX, Endings, Tracked, ended_reason
from .launcher_settings import LauncherAppChecks
from .report_batch import ReportBatcher
from .service_app import ServiceClientApp
from .service_client import ServiceError

HOLDING = ("admitted", "running", "preempting", "cancelling", "reclaiming")
STOPPING = ("preempting", "cancelling", "reclaiming")      # told to stop: stop it, then report "stopped"
LAUNCH_TURN = 8     # launches spawned in one look before the others (and their reports) get a turn
MTIME_TICK = 1.0    # seconds a file's time may lag time.time() (coarse file-system clocks, NFS)


class LauncherApp(Endings, LauncherAppChecks, ServiceClientApp):
    name = "computehub-launcher"
    description = "Starts admitted ComputeHub training, inference and batch workloads and reports back."
    classes = [LocalLauncher]
    token_scope = "custom:computehub:submit-on-behalf"
    aliases = {"config": "LauncherApp.config_file", "url": "LauncherApp.computehub_url",
               "data-dir": "LauncherApp.data_dir", "backend": "LauncherApp.backend_class"}

    data_dir = Unicode(config=True, help="""The service's data folder: job logs go to '<data_dir>/logs',
        where the service serves them (default: $COMPUTEHUB_DATA_DIR, else ./computehub-data).""")
    kinds = List(Unicode(), ["training", "inference", "batch"], config=True,
                 help="Workload kinds this launcher starts (notebooks are the spawners').")
    nodes = List(Unicode(), config=True, help="""Only start work placed on these nodes (e.g. this machine's,
        when a Kubernetes launcher serves the others); empty = every node.""")
    backend_class = Type(LocalLauncher, klass=LauncherBackend, config=True,
                         help="The backend that runs workloads (a LauncherBackend subclass).")
    poll_interval = Float(1.0, config=True, help="""Seconds between looks at the service's admitted work and
        at the running processes (admission → start latency is at most this plus a scheduling cycle).""")
    preempt_grace = Float(30.0, config=True, help="""Seconds a preempted job gets between SIGTERM and SIGKILL
        to save a checkpoint (in $COMPUTEHUB_CHECKPOINT_DIR).""")
    cancel_grace = Float(10.0, config=True, help="Seconds a cancelled job gets between SIGTERM and SIGKILL.")
    max_restarts = Integer(3, config=True, help="""Times a crashed inference service is restarted before it
        is reported failed (count).""")
    report_checkpoints = Bool(True, config=True, help="""Report each checkpoint a running job saves (where
        the backend can see it: the local backend reads the newest file in $COMPUTEHUB_CHECKPOINT_DIR)
        to the service, which then knows exactly what a preemption would lose, and lets a swap
        for shorter work go ahead as soon as its victim has saved.""")
    enforce_time_limit = Float(1.0, config=True, help="""Stop a job this many times its declared time limit
        after it started and report it failed (0 = never stop for time).""")

    backend = Instance(LauncherBackend, allow_none=True)

    @default("data_dir")
    def _data_dir(self):
        return os.environ.get("COMPUTEHUB_DATA_DIR") or os.path.abspath("computehub-data")

    def owned_config_classes(self) -> list[type]:
        return [type(self), LauncherBackend, self.backend_class]

    def initialize(self, argv=None):
        super().initialize(argv)
        self.backend = self.backend_class(parent=self, logs_dir=os.path.join(self.data_dir, "logs"))
        recheck(self.backend)           # defaults too ($POD_NAMESPACE): wrong ones stop the start
        self.reports = ReportBatcher(self.client)
        self.tracked: dict[str, Tracked] = {}
        self.stopping_ids: set[str] = set()        # being stopped; not started again until done
        self.tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()

    # --- talking to the service ------------------------------------------------------------

    async def holding(self) -> dict[str, dict]:
        states = "&".join(f"state={s}" for s in HOLDING)
        r = await self.client.request("GET", f"workloads?{states}&limit=10000")
        return {w["id"]: w for w in r["workloads"] if self.mine(w)}

    def mine(self, w: dict) -> bool:
        """Work this launcher runs: its kinds, its nodes, and a job description (metadata.job).
        Work without one is left to whoever submitted it (it reports its own status)."""
        if w["kind"] not in self.kinds or not isinstance((w.get("metadata") or {}).get("job"), dict):
            return False
        return not self.nodes or all(a["node"] in self.nodes for a in w.get("placement") or [])

    async def report(self, wid: str, state: str, **extra) -> dict | None:
        try:
            return await self.reports.report(wid, state, **extra)
        except ServiceError as e:
            if e.status in (404, 409):          # it ended (cancelled) meanwhile: nothing to report
                self.log.info("%s: not reported %s: %s", wid, state, e.message)
                return None
            raise

    def spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("launcher task failed", exc_info=task.exception())

    # --- recovery --------------------------------------------------------------------------------

    async def recover(self) -> None:
        """After a (re)start: adopt what still runs, report what died while nobody watched."""
        for wid, w in (await self.holding()).items():
            status = (w.get("metadata") or {}).get("status") or {}
            if await self.backend.adopt(w):
                self.log.info("%s: adopted (%s)", wid, w["state"])
                self.tracked[wid] = Tracked(w, restarts=int(status.get("restarts") or 0),
                                            ready=bool(status.get("ready")), started=w.get("started_at") or time.time())
                if w["state"] == "admitted":
                    await self.report(wid, "running")
            elif w["state"] == "running":
                await self.report(wid, "failed", exit_code=1,
                                  reason="its processes were gone when the launcher restarted")
            elif w["state"] in STOPPING:
                await self.report(wid, "stopped")

    # --- one look at everything -----------------------------------------------------------------

    async def reconcile(self) -> None:
        seen_at = time.time()
        live = await self.holding()
        launched = 0
        for wid, w in live.items():
            t = self.tracked.get(wid)
            if t is None:
                if wid in self.stopping_ids:
                    continue
                if w["state"] == "admitted":
                    self.tracked[wid] = Tracked(w, busy=True)
                    self.spawn(self.launch(w))
                    launched += 1
                    if launched % LAUNCH_TURN == 0:
                        # A burst (a job array's 1,000 tasks admitted in one cycle): let the launches
                        # spawned so far start, and their "running" go out, before spawning more.
                        await asyncio.sleep(0)
                elif w["state"] in STOPPING:       # preempted or cancelled before it was started here
                    await self.report(wid, "stopped")
                continue
            t.workload = w
            if t.busy:
                continue
            if w["state"] == "admitted":            # "running" lost, unless it started after this view was taken
                await self.report(wid, "running") if t.started < seen_at else None
                continue
            if w["state"] in STOPPING:
                t.busy = True
                grace = self.preempt_grace if w["state"] == "preempting" else self.cancel_grace
                self.spawn(self.halt(wid, t, grace, report="stopped"))
                continue
            limit = w.get("time_limit")
            if self.enforce_time_limit and limit and time.time() - t.started > limit * self.enforce_time_limit:
                t.busy = True
                self.spawn(self.halt(wid, t, self.cancel_grace, report="failed",
                                     reason=f"exceeded its time limit of {limit:g} s"))
                continue
            ended = t.ended or await self.backend.poll(w)
            if ended is not None:
                # reported in its own task: many jobs ending in one look report side by side
                t.busy = True
                self.spawn(self._report_ended(wid, t, ended))
            elif w["kind"] == "inference" and not t.ready:
                endpoint = await self.backend.ready(w)
                if endpoint:
                    t.ready = True
                    await self.report(wid, "update", endpoint=endpoint, ready=True,
                                      message=f"ready at {endpoint}")
            if ended is None and self.report_checkpoints and w["state"] == "running":
                await self._report_checkpoint(wid, t, w)
        # Tracked work the service no longer holds was cancelled (or requeued): stop it.
        for wid in [i for i in self.tracked if i not in live]:
            t = self.tracked[wid]
            if not t.busy:
                t.busy = True
                self.spawn(self.halt(wid, t, self.cancel_grace, report=None))

    async def _report_checkpoint(self, wid: str, t: Tracked, w: dict) -> None:
        """Tell the service about a checkpoint saved since the last one reported, in this run
        (what an earlier run saved is what this one resumed from, not news)."""
        saved = await self.backend.last_checkpoint(w)
        if saved is not None and saved > t.checkpoint and saved >= (w.get("started_at") or t.started):
            t.checkpoint = saved
            await self._report_saved(wid, saved)

    async def _report_saved(self, wid: str, at: float, on_stop: bool = False) -> None:
        """Report a saved checkpoint. A service that does not take such reports (one older than
        this launcher, during an upgrade: 400) turns them off for this run, so that nothing
        else in a look, or a preempted job's "stopped", waits behind them."""
        extra = {"on_stop": True} if on_stop else {}
        try:
            await self.report(wid, "checkpoint", at=min(at, time.time()), **extra)
        except ServiceError as e:
            if e.status != 400:
                raise
            self.log.warning("%s: checkpoint not reported (%s); not reporting checkpoints any more",
                             wid, e.message)
            self.report_checkpoints = False

    async def launch(self, w: dict) -> None:
        wid = w["id"]
        try:
            notes = await self.backend.start(w)
        except StartLater as e:
            self.tracked.pop(wid, None)             # still admitted: the next look starts it again
            self.log.info("%s: not started yet: %s", wid, e)
            return
        except LaunchError as e:
            self.tracked.pop(wid, None)
            self.log.info("%s: refused: %s", wid, e)
            await self.report(wid, "failed", exit_code=1, reason=f"could not start: {e}"[:REASON_MAX])
            return
        except Exception as e:
            self.tracked.pop(wid, None)
            self.log.exception("%s: start failed", wid)
            await self.report(wid, "failed", exit_code=1, reason=f"the launcher could not start it: {e}"[:REASON_MAX])
            return
        t = self.tracked[wid]
        t.started, t.busy = time.time(), False
        self.log.info("%s: started (%s)", wid, notes.get("message", ""))
        if w["kind"] == "inference":
            notes["ready"] = False
        if await self.report(wid, "running", **notes) is None:
            # cancelled while starting: the next look stops it
            self.log.info("%s: ended while it was being started", wid)

    async def _saved_before_stop(self, t: Tracked) -> float | None:
        if not self.report_checkpoints:
            return None
        try:
            return await self.backend.last_checkpoint(t.workload)
        except Exception as e:          # not knowing only makes the check after the stop coarser
            self.log.warning("%s: could not read its checkpoints before stopping it: %s", t.workload["id"], e)
            return None

    async def halt(self, wid: str, t: Tracked, grace: float, report: str | None, reason: str = "") -> None:
        """Stop a workload's processes and (optionally) report how it ended."""
        self.stopping_ids.add(wid)
        try:
            # What it had saved before it is told to stop: a newer save after is one it made on stop.
            # (Not told's time: file times come from a coarse clock, a tick behind time.time().)
            before = await self._saved_before_stop(t) if report == "stopped" else None
            told = time.time()
            try:
                ended = await self.backend.stop(t.workload, grace)
            except Exception:
                t.busy = False                    # tried again at the next look
                raise
            self.tracked.pop(wid, None)
            self.log.info("%s: stopped (%s)", wid, report or "no longer held by the service")
            if report == "stopped":
                saved = ended.checkpoint if ended else None
                if self.report_checkpoints and saved is not None \
                        and (saved > before if before is not None else saved >= told - MTIME_TICK):
                    # It saved when told to stop: from now on a preemption loses only its restart.
                    await self._report_saved(wid, saved, on_stop=True)
                await self.report(wid, "stopped")
            elif report == "failed":
                lines = ended.last_lines if ended else []
                if ended and ended.reason:          # how it was stopped (SIGKILL after the grace?)
                    reason = f"{reason}; {ended.reason}"
                await self.report(wid, "failed", exit_code=124,
                                  reason=ended_reason(Ended(124, reason, lines)))
        finally:
            self.stopping_ids.discard(wid)

    # --- run -------------------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        self.log.info("ComputeHub launcher (%s) watching %s for %s", type(self.backend).__name__,
                      self.computehub_url, ", ".join(self.kinds))
        recovered = False
        while not self._stop.is_set():
            try:
                if not recovered:
                    await self.recover()
                    recovered = True
                await self.reconcile()
            except ServiceError as e:
                self.log.warning("ComputeHub service: %s (retrying)", e)
            except Exception:
                self.log.exception("launcher look failed (retrying)")
            try:
                await asyncio.wait_for(self._stop.wait(), self.poll_interval)
            except asyncio.TimeoutError:
                pass
        # Work keeps running: a restarted launcher adopts it.
        for task in list(self.tasks):
            task.cancel()
        await self.backend.close()
        self.log.info("ComputeHub launcher stopped; running work keeps running")

    def start(self):
        asyncio.run(self._main())

    async def _main(self):
        self._stop = asyncio.Event()
        await self.run()


def main(argv=None):
    launch(LauncherApp, argv)


if __name__ == "__main__":
    main()
