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

from .local_failures import LINGER, read_exit_file
from .process_groups import descendants, group_alive, group_members, signal_group, start_time, strays

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
        # The exit file first: its shell stays on after writing it while the job left processes.
        ended = read_exit_file(self.exit_file)
        if ended is not None:
            if self.proc is not None:
                self.proc.poll()
            return ended[0]
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is None:
                return None
            ended = read_exit_file(self.exit_file)      # written just before it ended
            if ended is not None:
                return ended[0]
        else:
            now = start_time(self.pid, running=True)
            if now == self.started and now is not None:
                return None
            rc = None
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


def _same(w: Worker) -> bool:
    """Whether the worker's pid is still its shell (not a pid reused since), as far as is known."""
    return w.started is None or start_time(w.pid) in (w.started, None)


def _escaped(run: Run, leaders: list[Worker], skip_groups: set[int], after: float | None = None) -> dict[int, int]:
    """The job's processes outside its workers' process groups, by pid (their start times):
    those its workers' shells hold as children (``descendants``: what a worker left when its
    parent ended, whatever its session, group or environment), and those elsewhere that kept
    its environment (``strays``)."""
    found = {p for w in leaders for p in descendants(w.pid)}
    found.update(strays(run.exit_files(), run.uid, skip_groups=skip_groups, since=run.first_start(), after=after))
    shells = {w.pid for w in run.workers}
    found = {p for p in found if p not in shells and _group(p) not in skip_groups and not _lingering(p, shells)}
    starts = {p: start_time(p, running=True) for p in found}
    return {p: t for p, t in starts.items() if t is not None}


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _lingering(pid: int, shells: set[int]) -> bool:
    """Whether ``pid`` is a worker's shell's own sleep while it waits for what the job left, or
    the shell's fork about to become that sleep (its command line still the shell's: after the
    job has ended, the shell forks nothing else)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        if parent not in shells:
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        if cmdline == LINGER:
            return True
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            return cmdline == f.read()
    except (OSError, ValueError, IndexError):
        return False


def leftovers(run: Run) -> list[str]:
    """Processes of the job that still run although their worker's command ended (left in its
    process group, or escaped it — ``setsid``, a daemon, a cleared environment): one
    ``pid (name)`` each."""
    ended = [w for w in run.workers if w.returncode() is not None]
    running = {w.pid for w in run.workers if w not in ended}
    mine = [w for w in ended if _same(w)]
    shells = {w.pid for w in run.workers}
    pids = [p for w in mine for p in group_members(w.pid) if p not in shells and not _lingering(p, shells)]
    last_end = max((w.ended_at() for w in ended), default=None) if not running else None
    escaped = _escaped(run, mine, running, after=last_end if last_end != float("inf") else None)
    pids += [p for p in escaped if p not in pids]
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
    leaders = [w for w in run.workers if _same(w)]
    groups = [w.pid for w in leaders]
    escaped = _escaped(run, leaders, set(groups))
    for pgid in groups:
        signal_group(pgid, signal.SIGTERM)
    for pid in escaped:
        _signal(pid, signal.SIGTERM)

    def running():
        run.reap()
        return [g for g in groups if group_alive(g)], [p for p, t in escaped.items() if start_time(p, True) == t]
    deadline = time.monotonic() + grace
    while True:
        alive, stray = running()
        if not (alive or stray) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    killed = bool(alive or stray)
    # What its processes started during the grace, found the same way (pids in hand before the kill).
    escaped.update(_escaped(run, [w for w in leaders if w.pid in alive], set(groups)))
    stray = [p for p, t in escaped.items() if start_time(p, True) == t]
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
