"""A bound on how long the store waits for PostgreSQL, and fast failure while it does not answer.

A PostgreSQL server that stops answering without closing its connections (a paused VM, a
server process stopped or wedged, a network path that drops packets silently) leaves the
driver waiting in ``recv()`` for as long as the connection stays open: an hour or for good.
The service calls the store from its one event loop, so one such wait would stop it all:
no API answer, no ``/metrics``, no cycle. Nothing in libpq bounds it (``statement_timeout``
needs a server that runs; keepalives and ``tcp_user_timeout`` are answered by the server's
kernel while the process sleeps).

``Watchdog`` bounds it from the client's side. Each store call runs inside ``watch()``; a
thread of its own, looking every ``tick`` (a quarter of the timeout, at most a second),
notices a call still running ``timeout`` seconds after it began and shuts down the sockets of the store's connections (both directions, ``shutdown(2)``): the blocked
``recv()`` returns at once, the driver raises its "connection lost" error, SQLAlchemy
discards the connection, and the store raises ``StoreUnavailable`` (in doubt if it was
committing). Every connection is shut down, not only the stuck one: they all lead to the
same server, and the pool's next ``pre_ping`` would otherwise wait on them in turn.

A server that hangs usually hangs for every connection, and a new connection to it waits
for ``connect_timeout`` before failing. So a call that failed slowly (the watchdog fired,
or a connection attempt timed out) marks the database *not answering*: until a probe on a
thread of its own gets an answer, every call fails at once with ``StoreUnavailable``
(``refuse_while_down``) instead of waiting again. Calls that fail fast (a refused or killed
connection, a full disk) leave it alone: the next call tries the database itself, as before.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
import weakref

from sqlalchemy import event

from ..errors import StoreUnavailable

PROBE_INTERVAL_S = 1.0       # how often a database that did not answer is tried again
SLOW_FAILURE_S = 2.0         # a call that failed after this long marks the database not answering


class Call:
    """One store call being watched: ``fired`` once the watchdog broke its connections."""

    __slots__ = ("began", "fired")

    def __init__(self, began: float):
        self.began = began
        self.fired = False


class Watchdog:
    def __init__(self, timeout: float, probe, clock=time.monotonic):
        """``timeout``: seconds one store call may take; ``probe()``: connects and asks the
        database something trivial, raising when it cannot."""
        self.timeout = timeout
        self._probe = probe
        self._clock = clock
        self._connections: weakref.WeakSet = weakref.WeakSet()
        self._calls: dict[int, Call] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._down: str | None = None         # why the database is taken as not answering
        self._next_probe = 0.0
        self._prober: threading.Thread | None = None
        self._closed = False

    # -- what the store calls ----------------------------------------------------------

    def track(self, engine) -> None:
        """Watch every connection ``engine`` makes from now on."""
        event.listen(engine, "connect", lambda dbapi_conn, _record: self._connections.add(dbapi_conn))

    @property
    def down(self) -> str | None:
        return self._down

    def refuse_while_down(self) -> None:
        """Raise ``StoreUnavailable`` at once while the database is taken as not answering."""
        why = self._down
        if why is not None:
            raise StoreUnavailable(f"{why}; trying it again every {PROBE_INTERVAL_S:g} s in the background")

    @contextlib.contextmanager
    def watch(self):
        """Run one store call under the bound. A ``StoreUnavailable`` raised inside is raised
        again with the watchdog's words when it fired, and a slow failure marks the database
        as not answering. Costs a dict entry: the watchdog's thread looks every ``tick``
        seconds rather than being woken for each call (that cost the event loop the GIL)."""
        call = Call(self._clock())
        key = next(self._ids)
        self._calls[key] = call             # one dict operation: atomic, no lock needed
        if self._thread is None:
            self._ensure_thread()
        try:
            yield call
        except StoreUnavailable as e:
            took = self._clock() - call.began
            if call.fired:
                why = f"the database did not answer within {self.timeout:g} s"
                self._mark_down(why)
                raise StoreUnavailable(f"{why} ({e.detail})", in_doubt=e.in_doubt) from e
            if took >= SLOW_FAILURE_S:
                self._mark_down(f"the database did not answer ({e.detail}, after {took:.0f} s)")
            raise
        finally:
            self._calls.pop(key, None)

    @property
    def tick(self) -> float:
        """How often the thread looks: a call is broken off at most a quarter of the timeout
        late, and a database that did not answer is probed every ``PROBE_INTERVAL_S``."""
        return max(0.05, min(PROBE_INTERVAL_S, self.timeout / 4))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- the watchdog's thread -----------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="computehub-db-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                self._cond.wait(self.tick)
                if self._closed:
                    return
            now = self._clock()
            overdue = [c for c in list(self._calls.values()) if not c.fired and now - c.began >= self.timeout]
            if overdue:
                for c in overdue:
                    c.fired = True
                self._break_connections()
            if self._down is not None and not (self._prober and self._prober.is_alive()) \
                    and now >= self._next_probe:
                self._next_probe = now + PROBE_INTERVAL_S
                self._prober = threading.Thread(target=self._try_probe, daemon=True, name="computehub-db-probe")
                self._prober.start()

    def _mark_down(self, why: str) -> None:
        if self._down is None:
            self._next_probe = self._clock() + PROBE_INTERVAL_S
        self._down = why
        self._ensure_thread()

    def _try_probe(self) -> None:
        """On a thread of its own, watched like any call (a probe may hang too)."""
        answered = False
        with self.watch() as call:
            try:
                self._probe()
                answered = True
            except Exception:   # noqa: BLE001 - still not answering; tried again next interval
                pass
        if answered and not call.fired:
            self._down = None

    def _break_connections(self) -> None:
        for conn in list(self._connections):
            try:
                if conn.closed:
                    continue
                fd = conn.pgconn.socket      # psycopg 3
            except Exception:   # noqa: BLE001 - closed meanwhile, or not a PostgreSQL connection
                continue
            # An overdue call's connection cannot close meanwhile (its thread is blocked on it); an
            # idle one another thread closes between these two lines could see its number reused:
            # a window of a few instructions, open only while a call is overdue.
            with contextlib.suppress(OSError):
                s = socket.socket(fileno=socket.dup(fd))
                try:
                    s.shutdown(socket.SHUT_RDWR)
                finally:
                    s.close()


class BoundedCalls:
    """``SqlStore``'s side: every call it makes to the database runs under ``_watched``."""

    _watchdog: Watchdog | None = None

    def _bound_calls(self, timeout: float) -> None:
        """Bound calls to ``timeout`` seconds (0: no bound; SQLite: never)."""
        self._unbounded = threading.local()
        if timeout > 0:
            self._watchdog = Watchdog(timeout, self._probe)
            self._watchdog.track(self.engine)

    def _unbind_calls(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()

    def bind_also(self, engine) -> None:
        """Break off ``engine``'s connections too when a call is overdue (the hold's own)."""
        if self._watchdog is not None:
            self._watchdog.track(engine)

    @contextlib.contextmanager
    def unbounded(self):
        """Calls this thread makes inside wait as long as they take: the bound protects the
        service's event loop, and nothing waits on a service still starting (reading a large
        state may take longer than a call should) or on a worker thread's housekeeping."""
        self._unbounded.depth = getattr(self._unbounded, "depth", 0) + 1
        try:
            yield
        finally:
            self._unbounded.depth -= 1

    @contextlib.contextmanager
    def _watched(self, bounded: bool = True):
        """One call to the database, broken off after ``timeout`` (PostgreSQL)."""
        if self._watchdog is None or not bounded or getattr(self._unbounded, "depth", 0):
            yield
            return
        self._watchdog.refuse_while_down()
        with self._watchdog.watch():
            yield

    def _probe(self) -> None:
        with self.engine.connect() as c:
            c.exec_driver_sql("SELECT 1")


__all__ = ["BoundedCalls", "Watchdog", "PROBE_INTERVAL_S", "SLOW_FAILURE_S"]
