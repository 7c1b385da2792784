"""A local job's processes (spawner/launch_local.py): its workers, how each ended, stopping
all of it — process groups, and what escaped them — and the record a restarted launcher
adopts it from."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

from .local_failures import read_exit_file
from .process_groups import group_alive, group_members, signal_group, start_time, strays

log = logging.getLogger(__name__)


@dataclass
class Worker:
    rank: int
    pid: int
    started: int | None            # /proc start time, to recognise the process after a launcher restart
    exit_file: str
    port: int | None = None
    proc: subprocess.Popen | None = None   # None once adopted from a record (not our child)

    def returncode(self) -> int | None:
        """None while its command runs; its exit code once it ended (128+N when killed by
        signal N; -1 when it ended while nobody watched and left no code)."""
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is None:
                return None
        else:
            now = start_time(self.pid, running=True)
            if now == self.started and now is not None:
                return None
            rc = None
        ended = read_exit_file(self.exit_file)
        if ended is not None:
            return ended[0]
        if group_alive(self.pid):
            return None                   # its shell was killed; the command runs on in its group
        if rc is None:
            return -1                     # not our child, and no exit code written
        return 128 - rc if rc < 0 else rc

    def why(self) -> str:
        """What the wrapper said when it could not run the program ('' otherwise)."""
        ended = read_exit_file(self.exit_file)
        return ended[1] if ended else ""

    def ended_at(self) -> float:
        """When it ended, as far as can be told (its exit file's time), for ordering a gang's ends."""
        try:
            return os.stat(self.exit_file).st_mtime
        except OSError:
            return float("inf")


@dataclass
class Run:
    workers: list[Worker] = field(default_factory=list)
    node: str = ""
    checkpoint_dir: str = ""
    uid: int | None = None          # the job's account (None: the launcher's own)
    started_at: float | None = None  # UNIX time it started (None: adopted from an older record)
    ready: bool = False             # inference: its endpoint answered once

    def exit_files(self) -> set[str]:
        return {w.exit_file for w in self.workers}

    def first_start(self) -> int | None:
        """The kernel's start time of its first worker (None if one is unknown)."""
        starts = [w.started for w in self.workers]
        return None if not starts or None in starts else min(starts)

    def reap(self) -> None:
        for w in self.workers:
            if w.proc is not None:
                w.proc.poll()                     # so a dead leader is not a zombie

    def to_record(self) -> dict:
        return {"node": self.node, "checkpoint_dir": self.checkpoint_dir, "uid": self.uid,
                "started_at": self.started_at, "ready": self.ready,
                "workers": [{"rank": w.rank, "pid": w.pid, "started": w.started, "exit_file": w.exit_file,
                             "port": w.port} for w in self.workers]}

    @classmethod
    def from_record(cls, rec: dict) -> Run:
        return cls(node=rec.get("node", ""), checkpoint_dir=rec.get("checkpoint_dir", ""), uid=rec.get("uid"),
                   started_at=rec.get("started_at"), ready=bool(rec.get("ready", True)),
                   workers=[Worker(w["rank"], w["pid"], w["started"], w["exit_file"], w.get("port"))
                            for w in rec["workers"]])


def save_record(path: str, run: Run) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(run.to_record(), f)
    os.replace(tmp, path)


def leftovers(run: Run) -> list[str]:
    """Processes of the job that still run although their worker's command ended (left in its
    process group, or escaped it — ``setsid``, a daemon — with the job's environment): one
    ``pid (name)`` each."""
    ended = [w for w in run.workers if w.returncode() is not None]
    running = {w.pid for w in run.workers if w not in ended}
    pids = [p for w in ended if (w.started is None or start_time(w.pid) in (w.started, None))
            for p in group_members(w.pid)]
    last_end = max((w.ended_at() for w in ended), default=None) if not running else None
    pids += [p for p in strays(run.exit_files(), run.uid, skip_groups=running, since=run.first_start(),
                               after=last_end if last_end != float("inf") else None) if p not in pids]
    return [f"{p} ({_name(p)})" for p in pids]


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


async def kill_run(run: Run, grace: float) -> bool:
    """SIGTERM every worker's group and the job's processes that escaped them, wait up to
    ``grace`` seconds, then SIGKILL what is left. True if something had to be SIGKILLed."""
    groups = [w.pid for w in run.workers if w.started is None or start_time(w.pid) in (w.started, None)]
    escaped = strays(run.exit_files(), run.uid, skip_groups=set(groups))
    for pgid in groups:
        signal_group(pgid, signal.SIGTERM)
    for pid in escaped:
        _signal(pid, signal.SIGTERM)

    def running():
        run.reap()
        return [g for g in groups if group_alive(g)], [p for p in escaped if start_time(p, running=True)]
    deadline = time.monotonic() + grace
    while True:
        alive, stray = running()
        if not (alive or stray) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    killed = bool(alive or stray)
    for pgid in alive:
        signal_group(pgid, signal.SIGKILL)
    for pid in stray:
        _signal(pid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: return once nothing of it runs any more.
    deadline = time.monotonic() + 10
    while (alive or stray) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        alive, stray = running()
    if alive or stray:
        log.warning("process groups %s, processes %s still run after SIGKILL", alive, stray)
    return killed


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def kill_remnants(exit_files: set[str], uid: int | None) -> list[int]:
    """SIGKILL what an earlier run of a workload left running (a launcher killed while it started
    it, before its processes were recorded): before a new run starts, so that nothing of the old
    one holds its GPUs or writes its exit codes. The pids it killed."""
    found = strays(exit_files, uid)
    for pid in found:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(start_time(p, running=True) for p in found) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return found
