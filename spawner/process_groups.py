"""Processes on this machine, by process group: what the local launcher needs to tell a job's
processes apart from reused pids after its own restart, to see whether a group still runs,
and to signal it."""

from __future__ import annotations

import os
import socket


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


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass

