"""Whether a local inference job's endpoint is up: something of the job's own listens on its
port (not another program that a port a user named happens to reach) and answers HTTP."""

from __future__ import annotations

import asyncio
import os


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (any address, IPv4 or IPv6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:   # 0A: LISTEN
                        out.add(fields[9])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return out


def group_listens(pgid: int, port: int) -> bool:
    """Whether a process of group ``pgid`` holds a socket listening on ``port``: what answers
    there is the job's own, not another program's (the hub's, another user's service)."""
    inodes = listening_inodes(port)
    if not inodes:
        return False
    wanted = {f"socket:[{i}]" for i in inodes}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            fds = os.listdir(f"/proc/{entry}/fd")
        except (OSError, ValueError, IndexError):
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False


async def answers_http(host: str, port: int) -> bool:
    """Whether something accepts connections and answers HTTP on host:port."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        writer.write(f"HEAD / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 5)
        return line.startswith(b"HTTP/")
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        writer.close()
