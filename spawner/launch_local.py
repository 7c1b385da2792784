"""The local launcher backend: admitted workloads as processes on this machine.

Each worker is one process in its own session and process group, with
``CUDA_VISIBLE_DEVICES`` from its placement, its output appended to
``<logs_dir>/<workload id>.log``. Multi-worker jobs get ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1`` and one free ``MASTER_PORT``; inference
replicas get ``PORT``. Stopping sends SIGTERM to every worker's group, waits the
grace period, then SIGKILLs what is left.

Identity: run as the user's OS account when the launcher is root and one exists
(like JupyterHub's LocalProcessSpawner); otherwise as the launcher's own user —
demo mode, no isolation between users (``allow_launcher_user``). See docs/launchers.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass, field

from traitlets import Bool, Integer, List, Unicode, default

from .checkpoints import newest_save
from .launch_base import CHECKPOINT_ENV, REPORT_TOKEN_ENV, Ended, LaunchError, LauncherBackend, gpus_of, job_of
from .launcher_settings import LocalLauncherChecks
from .local_endpoints import answers_http, group_listens
from .process_groups import free_port, group_alive, signal_group, start_time

# The worker's command runs under sh so its exit code lands in a file: a launcher that
# restarts while the job runs is no longer its parent and could not learn it otherwise.
WRAPPER = '"$@"; rc=$?; echo $rc > "$COMPUTEHUB_EXIT_FILE"; exit $rc'
# Run as the job's OS account: its folders, no exit codes of an earlier run, the script from stdin.
PREPARE = ('umask 022; mkdir -p -- "$1" "$2" || exit 1; rm -f -- "$1"/exit.* || exit 1; '
           'if [ -n "$3" ]; then cat > "$3" || exit 1; fi')


@dataclass
class Worker:
    rank: int
    pid: int
    started: int | None            # /proc start time, to recognise the process after a launcher restart
    exit_file: str
    port: int | None = None
    proc: subprocess.Popen | None = None   # None once adopted from a record (not our child)

    def returncode(self) -> int | None:
        """None while it runs; its exit code once it ended (128+N when killed by signal N)."""
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is None:
                return None
            return 128 - rc if rc < 0 else rc
        now = start_time(self.pid, running=True)
        if (now == self.started and now is not None) or (now is None and group_alive(self.pid)):
            return None                   # still running (or its group is, after its shell died)
        try:
            with open(self.exit_file) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return -1                     # it ended while nobody watched; its code is unknown


@dataclass
class Run:
    workers: list[Worker] = field(default_factory=list)
    node: str = ""
    checkpoint_dir: str = ""


class LocalLauncher(LocalLauncherChecks, LauncherBackend):
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
    state_dir = Unicode(config=True, help="""Folder where the launcher records the processes of each
        workload, so a restarted launcher finds them again (default: '<logs_dir>/../launcher').""")
    run_dir_template = Unicode("{home}/.computehub/jobs/{id}", config=True, help="""Per-workload folder
        for the %%submit cell's script and exit codes ('{home}', '{id}', '{username}' expand).""")
    checkpoint_dir_template = Unicode("{home}/.computehub/checkpoints/{id}", config=True, help="""Per-workload
        folder given to jobs as $COMPUTEHUB_CHECKPOINT_DIR; it is kept when the job is preempted and
        requeued (same workload id), so the job can resume from what it saved there.""")
    host = Unicode("127.0.0.1", config=True, help="Address inference endpoints are reached at (and MASTER_ADDR).")
    node_name = Unicode("", config=True, help="Node name reported for local jobs ('' = the placement's).")
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

    # --- who, where -----------------------------------------------------------------

    def identity(self, user: str) -> pwd.struct_passwd | None:
        """The OS account to run as, or None for the launcher's own user (demo mode)."""
        if os.getuid() == 0 and self.run_as_os_user:
            try:
                pw = pwd.getpwnam(user)
            except KeyError:
                pw = None
            if pw is not None:
                if pw.pw_uid < self.min_uid:
                    raise LaunchError(f"user {user!r} maps to a system account (uid {pw.pw_uid}); "
                                      "jobs do not run as such accounts")
                return pw
        if not self.allow_launcher_user:
            why = "has no OS account on this machine" if self.run_as_os_user or os.getuid() != 0 else \
                "is not mapped to an OS account (run_as_os_user is off)"
            raise LaunchError(f"user {user!r} {why} and jobs may not run as the launcher's user "
                              f"({'root' if os.getuid() == 0 else 'uid %d' % os.getuid()}) here")
        return None

    def home_of(self, user: str, pw) -> str:
        if pw is not None:
            return pw.pw_dir
        return self.home_template.format(username=user) if self.home_template else ""

    def check_workdir(self, user: str, workdir: str, home: str, pw=None) -> str:
        """The real working directory, if it lies in the user's home or an allowed root."""
        roots = [r.format(username=user) for r in self.allowed_roots] + ([home] if home else [])
        if not workdir:
            if not home:
                raise LaunchError("no working directory given and the user has no home here")
            workdir = home
            if pw is None:                       # a demo home (home_template) is made on first use
                os.makedirs(workdir, exist_ok=True)
        real = os.path.realpath(workdir)
        for root in roots:
            r = os.path.realpath(root)
            if real == r or real.startswith(r.rstrip("/") + "/"):
                break
        else:
            where = ", ".join(roots) or "nowhere (no home, no LocalLauncher.allowed_roots)"
            raise LaunchError(f"working directory {workdir} is outside the folders jobs may run in: {where}")
        if not os.path.isdir(real):
            raise LaunchError(f"working directory {workdir} does not exist")
        return real

    async def _prepare(self, pw, run_dir: str, ckpt: str, script: str | None, text: str | None) -> None:
        """Make the job's run and checkpoint folders, clear exit codes of an earlier run and write
        the %%submit cell's script. For a job of an OS account this runs *as that account*: the
        folders lie in the user's home, and a root launcher that followed a link planted there
        would write where the user may not (a script "saved" over /etc/passwd)."""
        if pw is None:                   # the launcher's own user: no one to trick
            for d in (run_dir, ckpt):
                os.makedirs(d, 0o755, exist_ok=True)
            for name in os.listdir(run_dir):
                if name.startswith("exit."):
                    os.unlink(os.path.join(run_dir, name))    # from a run before a preemption
            if script is not None:
                with open(script, "w") as f:
                    f.write(text)
            return
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", PREPARE, "computehub-prepare", run_dir, ckpt, script or "",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            cwd="/", env={"PATH": "/usr/bin:/bin"}, user=pw.pw_uid, group=pw.pw_gid,
            extra_groups=os.getgrouplist(pw.pw_name, pw.pw_gid), start_new_session=True)
        try:
            _, err = await asyncio.wait_for(proc.communicate((text or "").encode()), 30)
        except asyncio.TimeoutError:
            proc.kill()
            raise LaunchError(f"preparing the job's folders as {pw.pw_name} took over 30 s") from None
        if proc.returncode:
            why = err.decode(errors="replace").strip().splitlines()
            raise LaunchError(f"could not prepare the job's folders as {pw.pw_name}: "
                              f"{why[-1] if why else 'exit code %d' % proc.returncode}")

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
        await self._prepare(pw, run_dir, ckpt, script, job.script)
        cmd = list(job.command)
        if script is not None:
            cmd = [a.replace("{script}", script) for a in cmd]
        os.makedirs(self.logs_dir, exist_ok=True)
        os.makedirs(self.state_dir, exist_ok=True)
        n = int(workload.get("workers") or 1)
        inference = workload.get("kind") == "inference"
        if inference and job.port and n > 1:
            raise LaunchError(f"{n} replicas cannot all listen on port {job.port} on one machine; "
                              "leave the port to the launcher ($PORT)")
        master_port = free_port(self.host)
        env0 = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8"),
                "PYTHONUNBUFFERED": "1"}
        env0.update(job.env)
        if self.job_computehub_url:     # the launcher's, as on Kubernetes: the job's reports go there
            env0["COMPUTEHUB_URL"] = self.job_computehub_url
        env0.update({"HOME": base, "USER": pw.pw_name if pw else user,
                     "LOGNAME": pw.pw_name if pw else user, "COMPUTEHUB_WORKLOAD_ID": wid,
                     CHECKPOINT_ENV: ckpt, "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
                     "MASTER_ADDR": self.host, "MASTER_PORT": str(master_port)})
        if workload.get("report_token"):
            env0[REPORT_TOKEN_ENV] = workload["report_token"]
        run = Run(node=self.node_name or ",".join(sorted({a["node"] for a in workload.get("placement") or []})),
                  checkpoint_dir=ckpt)
        log = os.open(self.log_path(workload), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            with open(self.log_path(workload), "a") as f:
                f.write(f"[computehub] {time.strftime('%Y-%m-%d %H:%M:%S')} starting {n} worker(s) "
                        f"of {wid} in {workdir}\n")
            for rank in range(n):
                port = (job.port or free_port(self.host)) if inference else None
                exit_file = os.path.join(run_dir, f"exit.{rank}")
                env = dict(env0, RANK=str(rank), LOCAL_RANK=str(rank), COMPUTEHUB_EXIT_FILE=exit_file,
                           CUDA_VISIBLE_DEVICES=",".join(map(str, gpus_of(workload, rank))))
                if port:
                    env["PORT"] = str(port)
                kw = {}
                if pw is not None:
                    kw = dict(user=pw.pw_uid, group=pw.pw_gid,
                              extra_groups=os.getgrouplist(pw.pw_name, pw.pw_gid))
                try:
                    proc = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "computehub-job"] + cmd, cwd=workdir,
                                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True, close_fds=True, **kw)
                except OSError as e:
                    await self._kill(run, 0)
                    raise LaunchError(f"could not start {cmd[0]!r}: {e.strerror or e}") from None
                run.workers.append(Worker(rank, proc.pid, start_time(proc.pid), exit_file, port, proc))
        finally:
            os.close(log)
        self._runs[wid] = run
        self._save(wid, run)
        gpus = "; ".join(",".join(map(str, gpus_of(workload, r))) or "-" for r in range(n))
        notes = {"node": run.node or "local",
                 "message": f"{n} worker(s) on {run.node or 'this machine'}, GPUs {gpus}"}
        return notes

    async def poll(self, workload: dict) -> Ended | None:
        run = self._runs.get(workload["id"])
        if run is None:
            return Ended(1, "the launcher does not know this workload's processes",
                         self.last_lines(workload))
        codes = [w.returncode() for w in run.workers]
        bad = [(w, c) for w, c in zip(run.workers, codes) if c not in (None, 0)]
        if bad:
            w, code = bad[0]
            if any(c is None for c in codes):          # one worker failed: the gang stops
                await self._kill(run, 5.0)
            self._forget(workload["id"])
            who = f"worker {w.rank}" if len(run.workers) > 1 else "the job"
            if code == -1:
                reason = f"{who} ended while the launcher was down; its exit code is unknown"
                code = 1
            else:
                reason = f"{who} exited with code {code}{_signame(code)}"
            return Ended(code, reason, self.last_lines(workload))
        if all(c == 0 for c in codes):
            self._forget(workload["id"])
            return Ended(0, "exit code 0", self.last_lines(workload))
        return None

    async def stop(self, workload: dict, grace_seconds: float) -> Ended | None:
        run = self._runs.get(workload["id"])
        if run is None:
            return None
        await self._kill(run, grace_seconds)
        self._forget(workload["id"])
        return Ended(143, f"stopped (SIGTERM, {grace_seconds:g} s grace)", self.last_lines(workload),
                     checkpoint=newest_save(run.checkpoint_dir) if run.checkpoint_dir else None)

    async def ready(self, workload: dict) -> str | None:
        run = self._runs.get(workload["id"])
        if run is None:
            return None
        for w in run.workers:
            # It must be the job that listens there: a port a user names may be another program's.
            if w.port and w.returncode() is None and group_listens(w.pid, w.port) \
                    and await answers_http(self.host, w.port):
                return f"http://{self.host}:{w.port}"
        return None

    async def last_checkpoint(self, workload: dict) -> float | None:
        """The newest file in its $COMPUTEHUB_CHECKPOINT_DIR (``checkpoints.newest_save``)."""
        run = self._runs.get(workload["id"])
        return newest_save(run.checkpoint_dir) if run is not None and run.checkpoint_dir else None

    async def adopt(self, workload: dict) -> bool:
        try:
            with open(self._record(workload["id"])) as f:
                rec = json.load(f)
            run = Run(node=rec.get("node", ""), checkpoint_dir=rec.get("checkpoint_dir", ""),
                      workers=[Worker(w["rank"], w["pid"], w["started"], w["exit_file"], w.get("port"))
                               for w in rec["workers"]])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        self._runs[workload["id"]] = run
        return True

    # --- processes ------------------------------------------------------------------------

    async def _kill(self, run: Run, grace: float) -> None:
        """SIGTERM every worker's group, wait up to ``grace`` seconds, then SIGKILL what is left."""
        groups = [w.pid for w in run.workers if w.started is None or start_time(w.pid) in (w.started, None)]
        for pgid in groups:
            signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while True:
            for w in run.workers:
                if w.proc is not None:
                    w.proc.poll()                  # reap, so a dead leader is not a zombie
            alive = [g for g in groups if group_alive(g)]
            if not alive or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
        for pgid in alive:
            signal_group(pgid, signal.SIGKILL)
        # SIGKILL is delivered asynchronously: return once nothing of the groups runs any more.
        deadline = time.monotonic() + 10
        while alive and time.monotonic() < deadline:
            for w in run.workers:
                if w.proc is not None:
                    w.proc.poll()
            alive = [g for g in alive if group_alive(g)]
            if alive:
                await asyncio.sleep(0.05)
        if alive:
            self.log.warning("process groups %s still run after SIGKILL", alive)

    def _record(self, wid: str) -> str:
        return os.path.join(self.state_dir, f"{wid}.json")

    def _save(self, wid: str, run: Run) -> None:
        rec = {"node": run.node, "checkpoint_dir": run.checkpoint_dir,
               "workers": [{"rank": w.rank, "pid": w.pid, "started": w.started, "exit_file": w.exit_file,
                            "port": w.port} for w in run.workers]}
        tmp = self._record(wid) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, self._record(wid))

    def _forget(self, wid: str) -> None:
        self._runs.pop(wid, None)
        try:
            os.unlink(self._record(wid))
        except OSError:
            pass


def _signame(code: int) -> str:
    if code > 128:
        try:
            return f" (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return ""

