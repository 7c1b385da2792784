"""Processes on this machine, by process group: what the local launcher needs to tell a job's
processes apart from reused pids after its own restart, to see whether a group still runs,
to signal it, and to find what a job left running outside its group (``strays``)."""

from __future__ import annotations

import os
import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_time(pid: int, running: bool = False) -> int | None:
    """The kernel's start time of a process (clock ticks since boot): tells a pid apart from a
    reused one. None if there is no such process (or, with ``running``, it is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if running and fields[0] == "Z":
        return None
    return int(fields[19])


def _running() -> list[tuple[int, list[str]]]:
    """(pid, /proc/<pid>/stat fields after the name) of every process that is not a zombie."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out.append((int(entry), fields))
    return out


_scan: tuple[float, list[tuple[int, list[str]]]] | None = None     # (when it began, what it found)


def running_after(t: float, max_age: float = 1.0) -> list[tuple[int, list[str]]]:
    """``_running()``, or the last scan if it began after ``t`` (UNIX time) and at most
    ``max_age`` seconds ago: jobs that end together (a poll round finds many) share one
    read of /proc; what ran at ``t`` and still runs is in either."""
    global _scan
    now = time.time()
    if _scan is not None and t <= _scan[0] and now - _scan[0] <= max_age:
        return _scan[1]
    procs = _running()
    _scan = (now, procs)
    return procs


def group_members(pgid: int) -> list[int]:
    """The running processes of a process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []           # nothing left in it: no need to read all of /proc (most jobs end so)
    except PermissionError:
        pass                # something of another account's is
    return [pid for pid, fields in _running() if int(fields[2]) == pgid]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    return bool(group_members(pgid))


def strays(exit_files: set[str], uid: int | None, skip_groups: set[int] = frozenset(),
           since: int | None = None, after: float | None = None) -> list[int]:
    """Running processes of account ``uid`` (None: this one's) outside ``skip_groups`` whose
    environment names one of a job's exit files ($COMPUTEHUB_EXIT_FILE): what a job left
    behind that left its process group (``setsid``, a daemon) but kept its environment.
    ``since``: the job's start (``start_time`` of its first process): what started before it
    cannot be its, and its environment is not read (a job's end then costs a read of each
    process's stat, not of every environment of the account's: bench/README, Slurm).
    ``after``: the job ended by then (UNIX time), so a scan begun since will do
    (``running_after``)."""
    uid = os.getuid() if uid is None else uid
    wanted = {b"COMPUTEHUB_EXIT_FILE=" + os.fsencode(f) for f in exit_files}
    out = []
    for pid, fields in (_running() if after is None else running_after(after)):
        if int(fields[2]) in skip_groups or pid == os.getpid() or (since is not None and int(fields[19]) < since):
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if wanted.intersection(env):
            out.append(pid)
    return out


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass



def _children(pid: int) -> list[int]:
    """The children of every thread of a process (/proc/<pid>/task/<tid>/children; [] where the
    kernel does not keep them, or the process is gone)."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """The running processes below ``pid`` (children, theirs, ...; zombies left out). Started
    under ``child_subreaper``, a job's wrapper keeps as its children what the job left behind
    when their parents ended, whatever their session, group or environment."""
    out, todo, seen = [], _children(pid), {pid}
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        if start_time(p, running=True) is not None:
            out.append(p)
        todo += _children(p)
    return out


def _prctl():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl() if os.uname().sysname == "Linux" else None
PR_SET_CHILD_SUBREAPER = 36


def child_subreaper() -> None:
    """Run in a new process before its program (Popen's preexec_fn): it becomes a child
    subreaper (Linux prctl), so what its descendants leave behind when they end is reparented
    to it rather than to init, and stays findable (``descendants``). The mark survives exec.
    Only a call already bound here runs in the child: nothing is imported or locked after fork."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
