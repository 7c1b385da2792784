"""A real, throw-away PostgreSQL server for tests.

``PgServer`` runs ``initdb`` into a fresh directory, starts ``postgres`` on
127.0.0.1 with a free port (its unix socket in the same directory) and stops it
with ``pg_ctl stop -m immediate``. ``halt`` and ``resume`` stop it (as a crash would) and
start it again on the same port and data, for tests of a database outage; ``pause`` and
``unpause`` freeze its processes (SIGSTOP) with their connections left open, as a paused VM
or a wedged server would. As root the
server runs as the ``postgres`` user (``runuser``), which owns the directory. The binaries are found with a
glob over ``/usr/lib/postgresql/*/bin`` (newest version first) or on ``PATH``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid

MISSING = ("PostgreSQL server binaries (initdb, pg_ctl) not found under "
           "/usr/lib/postgresql/*/bin or on PATH; `make test` installs them "
           "(apt-get install postgresql).")


def find_bindir() -> str | None:
    def version(path: str) -> tuple:
        v = os.path.basename(os.path.dirname(path))
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for d in dirs:
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "pg_ctl")):
            return d
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return os.path.dirname(initdb)
    return None


_HANDED_OUT: set[int] = set()


def _ephemeral() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server a test starts (and may restart) later.

    Not one the kernel picks for outgoing connections (below its ephemeral range: a hub's
    own client connections could otherwise take a port between this call and the server's
    listen, or while a restarted server is down), and never one handed out before in this
    process (two servers of one hub were once given the same port)."""
    low = _ephemeral()[0]
    lo, hi = (10000, low - 1) if low > 12000 else (low, 65535)
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(lo, hi)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port found between {lo} and {hi}")


class PgServer:
    def __init__(self, bindir: str):
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        self.base = tempfile.mkdtemp(prefix="computehub-pg-")
        self.data = os.path.join(self.base, "data")
        self.port: int | None = None
        self._opts = ""
        self._paused: list[int] = []
        if self.as_root:
            # Outside pytest's basetemp, whose 0700 parents the postgres user cannot traverse.
            shutil.chown(self.base, "postgres", "postgres")

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res

    def start(self) -> None:
        self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "--no-sync",
                  "-E", "UTF8", "--locale=C")
        last: Exception | None = None
        for _ in range(5):   # a free port may be taken between probing and binding
            self.port = free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} "
                    "-c fsync=off -c full_page_writes=off -c max_connections=200")
            try:
                self._run("pg_ctl", "-D", self.data, "-o", opts, "-l",
                          os.path.join(self.base, "server.log"), "-w", "-t", "60", "start")
                self._opts = opts
                return
            except RuntimeError as e:
                last = e
        raise RuntimeError(f"PostgreSQL did not start: {last}\n{self.log()}")

    def halt(self) -> None:
        """Stop the server at once (connections drop, nothing is shut down cleanly)."""
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start the halted server again, same port and data (it recovers from its WAL)."""
        self._run("pg_ctl", "-D", self.data, "-o", self._opts, "-l", os.path.join(self.base, "server.log"),
                  "-w", "-t", "60", "start")

    def _processes(self) -> list[int]:
        """The postmaster and its children (backends, background workers)."""
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        pids = [postmaster]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                if ppid == postmaster:
                    pids.append(int(entry))
        return pids

    def pause(self) -> None:
        """Freeze every process of the server: connections stay open, nothing answers."""
        self._paused = self._processes()
        for pid in self._paused:
            os.kill(pid, signal.SIGSTOP)

    def unpause(self) -> None:
        for pid in self._paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._paused = []

    def log(self) -> str:
        try:
            with open(os.path.join(self.base, "server.log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        self.unpause()      # a frozen server would not stop
        try:
            if os.path.exists(os.path.join(self.data, "postmaster.pid")):
                self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def create_database(self) -> str:
        """A new, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"
