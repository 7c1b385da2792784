"""One service per database: the exclusive hold ``computehub serve`` takes for its lifetime.

Each service keeps its scheduling state in memory and decides on it; two services on one
database would admit, preempt and place against two different memories. So the service
(and only the service: migrations, ``computehub simulate`` and tools that open a store to
read or repair need none) holds the database exclusively while it runs:

- SQLite: ``flock(LOCK_EX | LOCK_NB)`` on a lock file next to the database
  (``<database>.lock``), open for the process's life. The kernel releases it when the
  process ends, however it ends (``kill -9`` included). It cannot be lost while held.
- PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock(SERVICE_LOCK)``) on
  a connection of its own, outside the store's pool, idle in autocommit. The server
  releases it when that session ends: the process died, the connection was killed
  (``pg_terminate_backend``), the server restarted, or TCP keepalives (set on both sides,
  about a minute) found the holder's machine gone. A hold whose connection broke is
  taken again before the next write transaction begins; if another service has it by
  then, this one has lost the database for good (``LostExclusivity``) and must stop.
  Every write transaction also reads the holder record first (``_fence``), with a share
  lock the next holder's own record waits for, so no write of this one lands after the
  next one began, whenever the hold broke.
- In-memory SQLite is one process's own database: nothing to hold.

Who holds it (pid, host, since, the service's URL) is recorded in the ``meta`` table
under ``HOLDER_KEY``, so a refused service can say who to stop.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time

from sqlalchemy import create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import NullPool

from ..errors import StoreUnavailable

SERVICE_LOCK = 0x636F6D7073657276       # PostgreSQL advisory lock key ("compserv"); migrations use another
HOLDER_KEY = "service_holder"           # meta key: JSON of who holds the database
HOLD_APPLICATION_NAME = "computehub-service-hold"
# A holder whose machine vanished (no FIN ever comes) is noticed by the server after about
# idle + interval * count seconds, and the lock released; the client notices the same way.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 30, 10, 3


def holder_record(url: str = "") -> dict:
    """Who this process is, as recorded when it takes the hold."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "url": url}


def describe_holder(holder: dict | None) -> str:
    """``pid 4242 on host hub-0, since 2026-12-06 13:05 UTC, http://127.0.0.1:10101``."""
    if not holder:
        return "it did not say who it is"
    parts = []
    if holder.get("pid") is not None:
        parts.append(f"pid {holder['pid']}" + (f" on host {holder['host']}" if holder.get("host") else ""))
    if isinstance(holder.get("since"), (int, float)):
        parts.append("since " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(holder["since"])))
    if holder.get("url"):
        parts.append(str(holder["url"]))
    return ", ".join(parts) or "it did not say who it is"


def parse_holder(text: str | None) -> dict | None:
    try:
        holder = json.loads(text) if text else None
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


class HeldElsewhere(Exception):
    """Another service holds the database: this one must not run on it."""

    def __init__(self, holder: dict | None):
        self.holder = holder
        super().__init__(f"another ComputeHub service is using this database ({describe_holder(holder)})")


class LostExclusivity(StoreUnavailable):
    """This process's hold broke and another service took the database: nothing more may be
    written (every later write transaction raises this too). A ``StoreUnavailable``, so that
    callers caught in between get a 503 and nothing is half done; the service stops."""

    def __init__(self, holder: dict | None):
        self.holder = holder
        who = describe_holder(holder)
        super().__init__(f"lost the database to another ComputeHub service ({who})")
        self.message = ("this ComputeHub service lost its database to another service and is stopping; "
                        "nothing was changed, try again shortly")
        self.args = (f"this service lost the database to another ComputeHub service ({who})",)

    def __str__(self) -> str:
        return self.args[0]


class ExclusiveHold:
    """``SqlStore``'s side: taking the hold, and the check its write transactions make."""

    _hold: FileHold | PgHold | None = None
    _owner: dict | None = None
    _lost: LostExclusivity | None = None
    _fenced = False         # our holder record is written: write transactions check it (``_fence``)
    _owner_text: str | None = None      # the record as written

    def hold_exclusively(self, owner: dict, *, migrate: bool = True) -> None:
        """Take the database for this process alone, then migrate (``migrate``) and record
        ``owner`` (``holder_record``) in ``meta``. Raises ``HeldElsewhere``, having written
        nothing, while another process holds it; ``StoreUnavailable`` when the database cannot
        be reached. In-memory SQLite is this process's alone already."""
        if not self._memory:
            if self.dialect == "sqlite":
                with self._r():         # the database itself opens (its own error if not)
                    pass
                hold = FileHold(self.url.database)
            else:
                hold = PgHold(self.url, self._connect_args)
                self.bind_also(hold.engine)        # a hold that hangs is broken off too
            if not hold.take():
                hold.release()
                raise HeldElsewhere(self.holder())
            self._hold, self._owner, self._lost = hold, owner, None
        if migrate:
            self.migrate()
        self._owner_text = json.dumps(owner)
        with self.transaction():
            self.set_meta(HOLDER_KEY, self._owner_text)
        self._fenced = self._hold is not None

    def holder(self) -> dict | None:
        """Who holds the database, as recorded when it took it (None if unknown)."""
        try:
            return parse_holder(self.get_meta(HOLDER_KEY))
        except (sa_exc.SQLAlchemyError, StoreUnavailable):     # no schema yet, or unreachable
            return None

    def hold_backend_pid(self) -> int | None:
        """PostgreSQL: the server process of the hold's session (None: no such session)."""
        return self._hold.backend_pid() if isinstance(self._hold, PgHold) else None

    def _check_hold(self) -> None:
        """Called at the start of every write transaction while a hold was taken."""
        if self._lost is None:
            if self._hold.check():      # taken again if its connection broke; may raise StoreUnavailable
                return
            holder = self.holder()
            self._lost = LostExclusivity(None if holder == self._owner else holder)
            self._hold.release()
        raise LostExclusivity(self._lost.holder)

    def _fence(self, conn) -> None:
        """First in every write transaction once the hold is recorded: the holder record must
        still be ours. On PostgreSQL it is read with a share lock, which a service taking over
        (it records itself before it decides anything) waits for: whatever this transaction
        commits is committed before the other's first decision, even if the hold was lost
        after ``_check_hold`` looked. Raises ``LostExclusivity`` (the transaction rolls back)."""
        # The driver's own SQL: a Core select costs this hot path as much again as the read.
        if self.dialect == "postgresql":
            text = conn.exec_driver_sql("SELECT value FROM meta WHERE key = %(k)s FOR SHARE",
                                        {"k": HOLDER_KEY}).scalar()
        else:
            text = conn.exec_driver_sql("SELECT value FROM meta WHERE key = ?", (HOLDER_KEY,)).scalar()
        if text != self._owner_text:        # exactly what it wrote, unless another wrote since
            holder = parse_holder(text)
            if self._lost is None:
                self._lost = LostExclusivity(holder)
                self._hold.release()
            raise LostExclusivity(self._lost.holder)

    def _release_hold(self) -> None:
        if self._hold is not None:
            self._hold.release()


class FileHold:
    """SQLite: an exclusive ``flock`` on ``<database>.lock``, held while the file is open."""

    def __init__(self, database: str):
        self.path = os.path.abspath(database) + ".lock"
        self._fd: int | None = None

    def take(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)     # not inherited by children
        except OSError as e:
            raise StoreUnavailable(f"cannot open the lock file {self.path}: {e.strerror or e}") from None
        try:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def check(self) -> bool:
        return True             # a flock is only let go by closing the file

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock file stays: removing it would race with a new holder
            self._fd = None


class PgHold:
    """PostgreSQL: a session advisory lock on a connection of its own (``check`` re-takes it
    after the connection broke; False once another session has it)."""

    def __init__(self, url, connect_args: dict):
        args = dict(connect_args, application_name=HOLD_APPLICATION_NAME, keepalives=1,
                    keepalives_idle=KEEPALIVE_IDLE_S, keepalives_interval=KEEPALIVE_INTERVAL_S,
                    keepalives_count=KEEPALIVE_COUNT)
        self.engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT", connect_args=args)
        self._conn = None
        self._mutex = threading.Lock()

    def take(self) -> bool:
        """True: held now. Raises ``StoreUnavailable`` when the server cannot be reached."""
        with self._mutex:
            self._drop()
            try:
                conn = self.engine.connect()
            except sa_exc.DBAPIError as e:
                raise StoreUnavailable(_detail(e)) from e
            try:
                # The server's side of the keepalives (ignored on a Unix socket).
                for name, value in (("idle", KEEPALIVE_IDLE_S), ("interval", KEEPALIVE_INTERVAL_S),
                                    ("count", KEEPALIVE_COUNT)):
                    conn.exec_driver_sql(f"SET tcp_keepalives_{name} = {value}")
                got = conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({SERVICE_LOCK})").scalar()
            except sa_exc.DBAPIError as e:
                conn.close()
                raise StoreUnavailable(_detail(e)) from e
            if not got:
                conn.close()
                return False
            self._conn = conn
            return True

    def check(self) -> bool:
        """Still held (or held again): True. False: another session holds it now. Raises
        ``StoreUnavailable`` while the server cannot be reached to find out."""
        if self._alive():
            return True
        return self.take()

    def _alive(self) -> bool:
        with self._mutex:
            if self._conn is None or self._conn.closed or self._conn.invalidated:
                return False
            try:
                fd = self._conn.connection.driver_connection.fileno()
            except Exception:       # noqa: BLE001 - the driver says the connection is closed
                return False
            # The session is idle: nothing should arrive. Something readable is the server's
            # farewell (terminated, shutting down), an end of file, or, rarely, a notice.
            if not select.select([fd], [], [], 0)[0]:
                return True
            try:
                self._conn.exec_driver_sql("SELECT 1")
                return True
            except sa_exc.DBAPIError:
                return False

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:       # noqa: BLE001 - a broken connection may fail to close
                pass
            self._conn = None

    def backend_pid(self) -> int | None:
        """The server process of the hold's session (for operators and tests)."""
        with self._mutex:
            if self._conn is None:
                return None
            return self._conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()

    def release(self) -> None:
        with self._mutex:
            # Unlock before closing: the server frees a closed session's locks only once its
            # backend has exited, so a successor starting at once could still be refused.
            if self._conn is not None and not self._conn.closed and not self._conn.invalidated:
                try:
                    self._conn.exec_driver_sql(f"SELECT pg_advisory_unlock({SERVICE_LOCK})")
                except Exception:   # noqa: BLE001 - a broken session: ending it releases the lock
                    pass
            self._drop()
        self.engine.dispose()


def _detail(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__
