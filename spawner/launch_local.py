"""The local launcher backend: admitted workloads as processes on this machine.

Each worker is one process in its own session and process group, with
``CUDA_VISIBLE_DEVICES`` from its placement, its output appended to
``<logs_dir>/<workload id>.log`` (a gang's through a file per worker, each line marked with
its worker: ``local_logs``); who it runs as and where: ``local_accounts``. Multi-worker jobs
get ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1`` and one free ``MASTER_PORT``; inference
replicas get ``PORT``. Stopping sends SIGTERM to every worker's group, waits the
grace period, then SIGKILLs what is left (``local_runs``: also what a job left running after
it exited). Why a job ended, or could not start, is put in words by ``local_failures``.

Identity: run as the user's OS account when the launcher is root and one exists
(like JupyterHub's LocalProcessSpawner); otherwise as the launcher's own user —
demo mode, no isolation between users (``allow_launcher_user``). See docs/launchers.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from traitlets import Bool, Float, Integer, List, Unicode, default

from scheduler import arrays

from .checkpoints import newest_save
from .launch_base import CHECKPOINT_ENV, REPORT_TOKEN_ENV, Ended, LaunchError, LauncherBackend, gpus_of, job_of
from .launcher_settings import LocalLauncherChecks
from .local_accounts import LocalAccounts
from .local_endpoints import answers_http, group_listens
from .local_failures import WRAPPER, disk_full, exit_reason, start_error
from .local_logs import WorkerLogs
from .local_runs import Run, Worker, kill_remnants, kill_run, leftovers, save_record
from .process_groups import child_subreaper, free_port, start_time

class LocalLauncher(LocalAccounts, WorkerLogs, LocalLauncherChecks, LauncherBackend):
    """Runs workloads as local processes (``make demo``, single machines)."""

    allowed_roots = List(Unicode(), config=True, help="""Folders a job may run in besides the user's
        home ('{username}' expands to the hub user's name), e.g. ['/data/{username}', '/scratch'].
        The working directory a notebook sends must resolve inside one of them or the home.""")
    home_template = Unicode("", config=True, help="""Home of hub users that have no OS account (demo
        mode), e.g. '/srv/computehub/homes/{username}'. '' = such users have no home, and their
        jobs must name a working directory under allowed_roots.""")
    run_as_os_user = Bool(True, config=True, help="""When the launcher runs as root and the hub user
        has an OS account, run the job as that account (its uid, gid and groups).""")
    allow_launcher_user = Bool(config=True, help="""Run jobs of users without an OS account (or
        all jobs, when the launcher is not root) as the launcher's own user: demo mode, no isolation
        between users. False refuses such jobs with a clear reason. Default: True when the launcher
        is not root; False when it is (such jobs would run as root: `computehub demo` turns it on).""")
    min_uid = Integer(1000, config=True, help="""OS accounts below this uid (root, system accounts)
        never run jobs: a hub user named like one is refused.""")
    max_uid = Integer(60000, config=True, help="""OS accounts above this uid never run jobs either:
        65534 is 'nobody' (what NFS maps remote root to, shared by daemons), and Debian, Ubuntu and
        RHEL give people accounts up to 60000 (UID_MAX in /etc/login.defs). Raise it where user
        accounts come from a directory with higher uids.""")
    state_dir = Unicode(config=True, help="""Folder where the launcher records the processes of each
        workload, so a restarted launcher finds them again (default: '<logs_dir>/../launcher').""")
    run_dir_template = Unicode("{home}/.computehub/jobs/{id}", config=True, help="""Per-workload folder
        for the %%submit cell's script and exit codes ('{home}', '{id}', '{username}' expand).""")
    checkpoint_dir_template = Unicode("{home}/.computehub/checkpoints/{id}", config=True, help="""Per-workload
        folder given to jobs as $COMPUTEHUB_CHECKPOINT_DIR; it is kept when the job is preempted and
        requeued (same workload id), so the job can resume from what it saved there.""")
    ready_timeout = Float(600.0, config=True, help="""Seconds an inference service may take to answer HTTP
        on its port before it is stopped and reported failed (it would hold its GPUs without serving;
        0 = wait for ever).""")
    host = Unicode("127.0.0.1", config=True, help="Address inference endpoints are reached at (and MASTER_ADDR).")
    node_name = Unicode("", config=True, help="Node name reported for local jobs ('' = the placement's).")
    find_escaped = Bool(True, config=True, help="""Start each worker's shell as a child subreaper (Linux
        prctl): what a job leaves running when its parent ends becomes that shell's child, so it is found
        and stopped with the job whatever its session, group or environment. Costs each start a full fork
        of the launcher instead of a vfork (a few ms of CPU: bench/README.md); off, such a process is
        found only if it kept the job's process group or environment.""")
    job_computehub_url = Unicode(config=True, help="""$COMPUTEHUB_URL in jobs' environment: where a job
        reaches the service to report its own checkpoints (`computehub checkpoint`, with
        $COMPUTEHUB_REPORT_TOKEN). Default: the launcher's own service URL.""")

    @default("job_computehub_url")
    def _job_computehub_url(self):
        return self.launcher_service_url()

    @default("allow_launcher_user")
    def _allow_launcher_user(self):
        return os.getuid() != 0

    @default("state_dir")
    def _state_dir(self):
        return os.path.join(os.path.dirname(os.path.abspath(self.logs_dir)), "launcher")

    def __init__(self, **kw):
        super().__init__(**kw)
        self._runs: dict[str, Run] = {}

    # --- the backend interface ---------------------------------------------------------

    async def start(self, workload: dict) -> dict:
        wid, user = workload["id"], workload["user"]
        job = job_of(workload)
        pw = self.identity(user)
        home = self.home_of(user, pw)
        workdir = self.check_workdir(user, job.workdir, home, pw)
        base = home if home and os.path.isdir(home) else workdir     # e.g. nobody's /nonexistent
        subst = {"home": base, "id": wid, "username": user}
        run_dir = self.run_dir_template.format(**subst)
        ckpt = self.checkpoint_dir_template.format(**subst)
        script = os.path.join(run_dir, "script.py") if job.script is not None else None
        n = int(workload.get("workers") or 1)
        inference = workload.get("kind") == "inference"
        if inference and job.port and n > 1:
            raise LaunchError(f"{n} replicas cannot all listen on port {job.port} on one machine; "
                              "leave the port to the launcher ($PORT)")
        # Only a workload started before (its run folder exists) can have left something running.
        left = await kill_remnants({os.path.join(run_dir, f"exit.{r}") for r in range(n)},
                                   pw.pw_uid if pw else None) if os.path.isdir(run_dir) else []
        await self._prepare(pw, run_dir, ckpt, script, job.script)
        if left:
            self._note(workload, f"stopped {len(left)} process(es) an earlier start of it left running: {left}")
        cmd = list(job.command)
        if script is not None:
            cmd = [a.replace("{script}", script) for a in cmd]
        try:
            os.makedirs(self.state_dir, exist_ok=True)
        except OSError as e:
            raise LaunchError(start_error(e, "the launcher cannot record the job's processes")) from None
        master_port = free_port(self.host)
        env0 = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8"),
                "PYTHONUNBUFFERED": "1"}
        env0.update(job.env)
        env0.update(arrays.env(workload.get("array")))
        if self.job_computehub_url:     # the launcher's, as on Kubernetes: the job's reports go there
            env0["COMPUTEHUB_URL"] = self.job_computehub_url
        env0.update({"HOME": base, "USER": pw.pw_name if pw else user,
                     "LOGNAME": pw.pw_name if pw else user, "COMPUTEHUB_WORKLOAD_ID": wid,
                     CHECKPOINT_ENV: ckpt, "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
                     "MASTER_ADDR": self.host, "MASTER_PORT": str(master_port)})
        if workload.get("report_token"):
            env0[REPORT_TOKEN_ENV] = workload["report_token"]
        try:
            os.makedirs(self.logs_dir, exist_ok=True)
            log = os.open(self.log_path(workload), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        except OSError as e:
            raise LaunchError(start_error(e, "the launcher cannot write the job's log")) from None
        run = Run(node=self.node_name or ",".join(sorted({a["node"] for a in workload.get("placement") or []})),
                  checkpoint_dir=ckpt, uid=pw.pw_uid if pw else None, started_at=time.time())
        try:
            try:
                os.write(log, f"[computehub] {time.strftime('%Y-%m-%d %H:%M:%S')} starting {n} worker(s) "
                              f"of {wid} in {workdir}\n".encode())
            except OSError as e:
                raise LaunchError(start_error(e, "the launcher cannot write the job's log")) from None
            for rank in range(n):
                port = (job.port or free_port(self.host)) if inference else None
                exit_file = os.path.join(run_dir, f"exit.{rank}")
                env = dict(env0, RANK=str(rank), LOCAL_RANK=str(rank), COMPUTEHUB_EXIT_FILE=exit_file,
                           CUDA_VISIBLE_DEVICES=",".join(map(str, gpus_of(workload, rank))),
                           CUDA_DEVICE_ORDER="PCI_BUS_ID")     # the indices are NVML's (PCI bus order)
                if port:
                    env["PORT"] = str(port)
                kw = {}
                if pw is not None:
                    kw = dict(user=pw.pw_uid, group=pw.pw_gid,
                              extra_groups=os.getgrouplist(pw.pw_name, pw.pw_gid))
                out = log
                try:
                    if n > 1:        # a file of its own, merged into the log with its rank (local_logs.py)
                        out = os.open(self.worker_log(wid, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
                    proc = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "computehub-job"] + cmd, cwd=workdir,
                                            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                            start_new_session=True, close_fds=True,
                                            preexec_fn=child_subreaper if self.find_escaped else None, **kw)
                except OSError as e:
                    if e.filename == workdir:
                        raise LaunchError(f"could not enter its working directory {workdir}: "
                                          f"{e.strerror or e}") from None
                    raise LaunchError(start_error(e, f"could not start worker {rank}")) from None
                finally:
                    if out != log:
                        os.close(out)
                run.workers.append(Worker(rank, proc.pid, start_time(proc.pid), exit_file, port, proc))
            try:
                save_record(self._record(wid), run)
            except OSError as e:
                raise LaunchError(start_error(e, "the launcher cannot record the job's processes")) from None
        except BaseException:
            await kill_run(run, 0)              # nothing of a start that failed keeps running
            raise
        finally:
            os.close(log)
        self._runs[wid] = run
        gpus = "; ".join(",".join(map(str, gpus_of(workload, r))) or "-" for r in range(n))
        return {"node": run.node or "local", "message": f"{n} worker(s) on {run.node or 'this machine'}, GPUs {gpus}"}

    def _merge(self, workload: dict, run: Run, final: bool = False) -> None:
        """A gang's output so far (``final``: all of it) into the workload's log (local_logs.py)."""
        if len(run.workers) > 1:
            label = "replica" if workload.get("kind") == "inference" else "worker"
            self.merge_worker_logs(workload, len(run.workers), label, final)

    def _who(self, workload: dict, run: Run, w: Worker) -> str:
        if workload.get("kind") == "inference":
            return f"replica {w.rank}" if len(run.workers) > 1 else "the service"
        return f"worker {w.rank}" if len(run.workers) > 1 else "the job"

    async def poll(self, workload: dict) -> Ended | None:
        wid = workload["id"]
        run = self._runs.get(wid)
        if run is None:
            return Ended(1, "the launcher does not know this workload's processes",
                         self.last_lines(workload))
        self._merge(workload, run)
        codes = [w.returncode() for w in run.workers]
        bad = sorted(((w, c) for w, c in zip(run.workers, codes) if c not in (None, 0)),
                     key=lambda wc: (wc[0].ended_at(), wc[0].rank))
        if not bad and None in codes:
            return await self._never_ready(workload, run)
        left = leftovers(run)
        if left:
            self._note(workload, f"it left {len(left)} process(es) running after it exited: "
                                 f"{', '.join(left[:5])}; stopping them")
        if bad or left:
            await kill_run(run, 5.0)                # one worker failed: the gang stops; and what it left
        full = bool(bad) and disk_full(self.logs_dir)
        self._merge(workload, run, final=True)
        self._forget(wid)
        if bad:
            w, code = bad[0]
            who = self._who(workload, run, w)
            if code == -1:
                reason, code = f"{who} ended while the launcher was down; its exit code is unknown", 1
            else:
                reason = exit_reason(who, code, w.why())
            then = [exit_reason(self._who(workload, run, x), c) for x, c in bad[1:] if c != -1]
            if then:
                reason += "; then " + ", ".join(then)
            if None in codes:
                reason += f"; the other {'replicas' if workload.get('kind') == 'inference' else 'workers'} were stopped"
        else:
            code, reason = 0, "exit code 0"
        if left:
            reason += f"; it left {len(left)} process(es) running after it exited ({', '.join(left[:3])}): stopped"
        if full:
            reason += ("; the disk of its log is full (its output is cut short, and writing it may have "
                       "failed the job)")
        lines = self.last_lines(workload)
        if code and not bad[0][0].why():       # (the wrapper's own line says why it could not run)
            self._note(workload, reason)       # where %submit's display and `computehub logs` show it
        return Ended(code, reason, lines)

    async def _never_ready(self, workload: dict, run: Run) -> Ended | None:
        """An inference service that has not answered within ``ready_timeout``: stopped, failed."""
        if workload.get("kind") != "inference" or run.ready or not self.ready_timeout or run.started_at is None \
                or time.time() - run.started_at < self.ready_timeout:
            return None
        ports = ", ".join(str(w.port) for w in run.workers if w.port) or "?"
        self._note(workload, f"no answer on port {ports} within {self.ready_timeout:g} s; stopping it")
        await kill_run(run, 5.0)
        self._merge(workload, run, final=True)
        self._forget(workload["id"])
        return Ended(1, f"the service did not answer HTTP on port {ports} within {self.ready_timeout:g} s "
                        f"(LocalLauncher.ready_timeout): does it listen on $PORT, at {self.host}?",
                     self.last_lines(workload), final=True)

    async def stop(self, workload: dict, grace_seconds: float) -> Ended | None:
        run = self._runs.get(workload["id"])
        if run is None:
            return None
        killed = await kill_run(run, grace_seconds)
        self._merge(workload, run, final=True)
        self._forget(workload["id"])
        if killed:
            reason = f"it did not exit within the {grace_seconds:g} s grace after SIGTERM: killed (SIGKILL)"
            self._note(workload, reason)
        else:
            reason = f"stopped (SIGTERM, {grace_seconds:g} s grace)"
        return Ended(137 if killed else 143, reason, self.last_lines(workload),
                     checkpoint=newest_save(run.checkpoint_dir) if run.checkpoint_dir else None)

    async def ready(self, workload: dict) -> str | None:
        run = self._runs.get(workload["id"])
        if run is None:
            return None
        for w in run.workers:
            # It must be the job that listens there: a port a user names may be another program's.
            if w.port and w.returncode() is None and group_listens(w.pid, w.port) \
                    and await answers_http(self.host, w.port):
                if not run.ready:
                    run.ready = True
                    try:
                        save_record(self._record(workload["id"]), run)
                    except OSError as e:        # a restarted launcher would time it out: say so
                        self.log.warning("%s: could not record that it is ready: %s", workload["id"], e)
                return f"http://{self.host}:{w.port}"
        return None

    async def last_checkpoint(self, workload: dict) -> float | None:
        """The newest file in its $COMPUTEHUB_CHECKPOINT_DIR (``checkpoints.newest_save``)."""
        run = self._runs.get(workload["id"])
        return newest_save(run.checkpoint_dir) if run is not None and run.checkpoint_dir else None

    async def adopt(self, workload: dict) -> bool:
        try:
            with open(self._record(workload["id"])) as f:
                run = Run.from_record(json.load(f))
        except (OSError, ValueError, KeyError, TypeError):
            return False
        self._runs[workload["id"]] = run
        return True

    # --- records, notes ----------------------------------------------------------------

    def _note(self, workload: dict, text: str) -> None:
        """A line of the launcher's own in the job's log (best effort: a full disk loses it)."""
        line = f"[computehub] {time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n".encode()
        try:
            with open(self.log_path(workload), "a+b") as f:
                # On a line of its own, even after output that did not end its last line.
                if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                    line = b"\n" + line
                f.write(line)
        except OSError:
            pass

    def _record(self, wid: str) -> str:
        return os.path.join(self.state_dir, f"{wid}.json")

    def _forget(self, wid: str) -> None:
        self._runs.pop(wid, None)
        try:
            os.unlink(self._record(wid))
        except OSError:
            pass
