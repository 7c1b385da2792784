"""The durable store: SQLite (WAL, the embedded default) or PostgreSQL via SQLAlchemy 2.

``SqlStore(url)`` opens the database and brings its schema to the newest
Alembic revision. It behaves like ``MemoryStore`` for every method of ``Store``;
the differences are what durability adds:

- every write must happen inside ``transaction()`` (one database transaction:
  commit on normal exit, rollback on an exception; nested calls join the outer
  one); a write outside one raises ``RuntimeError``;
- ``put_workload`` (``put_workloads`` for several, all their old assignments
  removed before any new one is written) keeps ``gpu_assignments`` in step with
  the placement of a workload that holds resources, and the table's primary key
  (node, gpu index) refuses a GPU held by two workloads: the ``IntegrityError``
  propagates and the transaction rolls back;
- ``load()`` lists queues, priority classes and nodes ordered by name;
  objects returned are fresh copies, never shared with the store.

SQLite runs with ``journal_mode=WAL``, ``synchronous=FULL`` (an acknowledged
commit survives a kill -9 or a power cut), foreign keys on and a busy timeout;
write transactions start with ``BEGIN IMMEDIATE`` so concurrent writers queue
instead of failing on a lock upgrade.

When the database cannot do what is asked (PostgreSQL down, restarting or its
connection killed; SQLite's disk full or its file read-only) every method raises
``StoreUnavailable`` (``scheduler.errors``), never the driver's exception: a
transaction that failed was rolled back, unless the failure came while committing
(``in_doubt``: PostgreSQL may have committed it before the connection broke). A
refused write (``IntegrityError``) is not an outage and propagates as it is.
Connections are checked before use (``pool_pre_ping``) and made anew, so the store
works again by itself once the database is back; a PostgreSQL connection attempt
gives up after ``connect_timeout`` (10 s unless the URL says otherwise, and never more
than ``timeout``). A PostgreSQL call that takes longer than ``timeout`` seconds (15 by
default; 0: no bound) is broken off and raises ``StoreUnavailable``; until the server
answers again, calls fail at once (``watchdog.py``). SQLite waits at most its busy timeout
(30 s) for another writer's lock.

``hold_exclusively(owner)`` (the service calls it, nobody else) takes the database for this
process alone until ``close()`` or the process ends (``exclusive.py``); while held, every
write transaction first makes sure it still is (``LostExclusivity`` once another took it).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading

from sqlalchemy import Connection, create_engine, delete, event, func, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from ..errors import StoreUnavailable
from ..model import HOLDING, TERMINAL, Allocation, Event, NodeSpec, PriorityClass, QueueSpec, Workload
from . import tables as T
from .base import PURGED_SEQ, Store
from .exclusive import ExclusiveHold
from .sql_reads import SqlReads
from .watchdog import BoundedCalls

BUSY_TIMEOUT_MS = 30_000
_WRITE = "computehub_write"          # execution option marking a write transaction
_MIGRATION_LOCK = 0x636F6D70         # PostgreSQL advisory lock id ("comp") for migrations
CONNECT_TIMEOUT_S = 10               # PostgreSQL: give up a connection attempt after this
DEFAULT_TIMEOUT_S = 15.0             # PostgreSQL: break off a store call that takes longer
_SQLITE_IOERR = 10                   # SQLite's primary result code of an I/O error


def _outage(e: BaseException) -> bool:
    """Whether a database error means the database could not do it (down, restarting, the
    connection lost, the disk full, read-only), not that it refused this change."""
    return isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)) or (
        isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated)


def _detail(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def migrations_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def alembic_config(connection: Connection | None = None):
    """An Alembic ``Config`` built in code (no ini file), bound to ``connection``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", migrations_dir())
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _sqlite_setup(engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None    # we issue BEGIN ourselves (pysqlite's is broken)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def _array_id(w: Workload) -> str | None:
    return w.array["id"] if w.array else None


def _ended_at(w: Workload) -> float | None:
    """The ``ended_at`` column: when ended work ended (its submission if it never ran)."""
    if w.state not in TERMINAL:
        return None
    return w.ended_at if w.ended_at is not None else w.submitted_at


class SqlStore(BoundedCalls, ExclusiveHold, SqlReads, Store):
    """``Store`` on a SQL database; see the module docstring for the guarantees."""

    def __init__(self, url: str, *, migrate: bool = True, echo: bool = False,
                 timeout: float = DEFAULT_TIMEOUT_S):
        u = make_url(url)
        self.url = u
        self.dialect = u.get_backend_name()
        kw: dict = {"echo": echo, "future": True}
        self._memory = False
        if self.dialect == "sqlite":
            self._memory = u.database in (None, "", ":memory:") or u.query.get("mode") == "memory"
            kw["connect_args"] = {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}
            if self._memory:
                kw["poolclass"] = StaticPool     # one shared connection: one database
        else:
            kw["pool_pre_ping"] = True       # a connection the server dropped is replaced, not used
            if "connect_timeout" not in u.query:
                bound = min(CONNECT_TIMEOUT_S, math.ceil(timeout)) if timeout > 0 else CONNECT_TIMEOUT_S
                kw["connect_args"] = {"connect_timeout": max(2, bound)}     # libpq takes 2 s at least
        self._connect_args = dict(kw.get("connect_args", {}))     # for the hold's own connection
        self.engine = create_engine(u, **kw)
        self._bound_calls(timeout if self.dialect == "postgresql" else 0)
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine)
        self._lock = threading.RLock()       # one write transaction at a time in this process
        self._conn: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
            f"computehub_store_{id(self)}", default=None)
        self._upserts: dict[str, object] = {}
        if migrate:
            self.migrate()

    # -- transactions -------------------------------------------------------------------

    def _unavailable(self, e: BaseException, committing: bool) -> StoreUnavailable:
        # A commit that failed on PostgreSQL may have been made before the connection broke.
        # SQLite's COMMIT is all or nothing (a full disk or a read-only file leaves it undone),
        # save for an I/O error, after which a frame may still be in the log.
        in_doubt = committing and (self.dialect != "sqlite" or (
            getattr(getattr(e, "orig", None), "sqlite_errorcode", 0) & 0xFF) == _SQLITE_IOERR)
        return StoreUnavailable(_detail(e), in_doubt=in_doubt)

    @contextlib.contextmanager
    def _begin(self, bounded: bool = True):
        with self._watched(bounded), self._transaction_begun() as conn:
            yield conn

    @contextlib.contextmanager
    def _transaction_begun(self):
        committing = False
        try:
            with self._lock:
                if self._hold is not None:
                    self._check_hold()          # before anything is sent: nothing is half done
                with self.engine.connect() as conn:
                    conn.execution_options(**{_WRITE: True})
                    with conn.begin():
                        if self._fenced:
                            self._fence(conn)
                        yield conn
                        committing = True
        except sa_exc.DBAPIError as e:
            if not _outage(e):
                raise
            raise self._unavailable(e, committing) from e
        except sa_exc.TimeoutError as e:       # no connection free in the pool
            raise self._unavailable(e, False) from e

    def migrate(self) -> None:
        """Bring the schema to the newest revision (``alembic upgrade head``)."""
        from alembic import command

        with self._begin(bounded=False) as conn:     # a migration of a long history takes its time
            if self.dialect == "postgresql":    # two processes starting at once migrate in turn
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
            command.upgrade(alembic_config(conn), "head")

    @contextlib.contextmanager
    def transaction(self):
        if self._conn.get() is not None:     # nested: join the outer transaction
            yield self
            return
        with self._begin() as conn:
            token = self._conn.set(conn)
            try:
                yield self
            finally:
                self._conn.reset(token)

    def _w(self) -> Connection:
        conn = self._conn.get()
        if conn is None:
            raise RuntimeError("SqlStore: writes must happen inside `with store.transaction():`")
        return conn

    @contextlib.contextmanager
    def _r(self, consistent: bool = False):
        """A connection for reading: the current transaction's, or a short read-only one."""
        conn = self._conn.get()
        if conn is not None:
            yield conn
            return
        with self._watched(), self._read_connection(consistent) as c:
            yield c

    @contextlib.contextmanager
    def _read_connection(self, consistent: bool):
        try:
            with self._lock if self._memory else contextlib.nullcontext(), self.engine.connect() as c:
                if consistent and self.dialect == "postgresql":
                    c.execution_options(isolation_level="REPEATABLE READ")
                try:
                    yield c
                finally:
                    c.rollback()
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as e:
            if not _outage(e):
                raise
            raise StoreUnavailable(_detail(e)) from e

    def _upsert(self, table, keys: tuple[str, ...]):
        stmt = self._upserts.get(table.name)
        if stmt is None:
            if self.dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert as dialect_insert
            else:
                from sqlalchemy.dialects.sqlite import insert as dialect_insert
            ins = dialect_insert(table)
            stmt = ins.on_conflict_do_update(
                index_elements=list(keys),
                set_={c.name: ins.excluded[c.name] for c in table.c if c.name not in keys})
            self._upserts[table.name] = stmt
        return stmt

    # -- writes -------------------------------------------------------------------------

    def _put_spec(self, table, name: str, spec: dict) -> None:
        self._w().execute(self._upsert(table, ("name",)), {"name": name, "spec": spec})

    def _delete_spec(self, table, name: str) -> None:
        self._w().execute(delete(table).where(table.c.name == name))

    def put_queue(self, spec: QueueSpec) -> None:
        self._put_spec(T.queues, spec.name, spec.to_dict())

    def delete_queue(self, name: str) -> None:
        self._delete_spec(T.queues, name)

    def put_class(self, pc: PriorityClass) -> None:
        self._put_spec(T.priority_classes, pc.name, pc.to_dict())

    def delete_class(self, name: str) -> None:
        self._delete_spec(T.priority_classes, name)

    def put_node(self, spec: NodeSpec) -> None:
        self._put_spec(T.nodes, spec.name, spec.to_dict())

    def delete_node(self, name: str) -> None:
        self._delete_spec(T.nodes, name)

    def put_workload(self, w: Workload) -> None:
        self.put_workloads([w])

    def put_workloads(self, ws: list[Workload]) -> None:
        ws = list({w.id: w for w in ws}.values())      # once each, as last given
        if not ws:
            return
        conn = self._w()
        conn.execute(self._upsert(T.workloads, ("id",)), [{
            "id": w.id, "seq": w.seq, "user": w.user, "queue": w.queue, "kind": w.kind,
            "priority": w.priority, "state": w.state, "submitted_at": w.submitted_at,
            "ended_at": _ended_at(w), "array_id": _array_id(w), "data": w.to_dict()} for w in ws])
        # Every old assignment goes before any new one is written.
        ga = T.gpu_assignments
        conn.execute(delete(ga).where(ga.c.workload_id.in_([w.id for w in ws])))
        rows = [{"node": a.node, "gpu_index": i, "workload_id": w.id}
                for w in ws if w.state in HOLDING for a in w.placement for i in a.gpus]
        if rows:
            conn.execute(insert(ga), rows)    # a GPU already held raises IntegrityError

    def add_new_workloads(self, ws: list[Workload]) -> None:
        # One multi-row INSERT (no upsert: an id already stored raises IntegrityError).
        if ws:
            self._w().execute(insert(T.workloads), [
                {"id": w.id, "seq": w.seq, "user": w.user, "queue": w.queue, "kind": w.kind,
                 "priority": w.priority, "state": w.state, "submitted_at": w.submitted_at,
                 "ended_at": _ended_at(w), "array_id": _array_id(w), "data": w.to_dict()} for w in ws])

    def add_events(self, events: list[Event]) -> None:
        if events:
            self._w().execute(insert(T.events), [
                {"time": e.time, "kind": e.kind, "workload_id": e.workload_id, "reason": e.reason,
                 "data": e.data} for e in events])

    def add_event(self, event: Event) -> None:   # noqa: F811 (the interface's name)
        res = self._w().execute(insert(T.events), {
            "time": event.time, "kind": event.kind, "workload_id": event.workload_id,
            "reason": event.reason, "data": event.data})
        event.id = res.inserted_primary_key[0]

    def open_allocation(self, a: Allocation) -> None:
        self._w().execute(insert(T.allocations), a.to_dict())

    def close_allocation(self, workload_id: str, end: float) -> None:
        # Like MemoryStore: only the workload's latest allocation, and only if still open.
        al = T.allocations
        latest = select(func.max(al.c.id)).where(al.c.workload_id == workload_id).scalar_subquery()
        self._w().execute(update(al).where(al.c.id == latest, al.c.end.is_(None)).values(end=end))

    def put_fairshare(self, time: float, usage: dict[str, dict[str, float]]) -> None:
        self._w().execute(self._upsert(T.fairshare, ("id",)), {
            "id": 1, "time": time, "usage": {k: dict(v) for k, v in usage.items()}})

    def set_meta(self, key: str, value: str) -> None:
        self._w().execute(self._upsert(T.meta, ("key",)), {"key": key, "value": value})

    def purge_history(self, *, workloads_before=None, events_before=None, allocations_before=None,
                      batch: int = 2000) -> dict[str, int]:
        wl, ev, al = T.workloads, T.events, T.allocations
        plans = []
        if workloads_before is not None:
            plans.append(("workloads", wl, wl.c.seq, (wl.c.state.in_(TERMINAL), wl.c.ended_at < workloads_before)))
        if events_before is not None:
            # The newest event stays: SQLite would hand its id out again, and readers resume
            # from the last id they saw.
            newest = select(func.max(ev.c.id)).scalar_subquery()
            plans.append(("events", ev, ev.c.id, (ev.c.time < events_before, ev.c.id < newest)))
        if allocations_before is not None:
            plans.append(("allocations", al, al.c.id, (al.c.end.is_not(None), al.c.end < allocations_before)))
        gone = {}
        for name, table, key, where in plans:
            gone[name] = 0
            while True:     # one short transaction a batch: the scheduler's writes go between them
                with self.transaction():
                    conn = self._w()
                    keys = conn.execute(select(key).where(*where).order_by(key).limit(batch)).scalars().all()
                    if not keys:
                        break
                    conn.execute(delete(table).where(key.in_(keys)))
                    if table is wl:     # ids are made from seq: the highest ever used is kept
                        floor = int(self.get_meta(PURGED_SEQ) or 0)
                        self.set_meta(PURGED_SEQ, str(max(floor, keys[-1])))
                gone[name] += len(keys)
                if len(keys) < batch:
                    break
        return gone

    def refresh_statistics(self) -> None:
        # Without statistics SQLite takes "state IN (ended states)" for a selective filter and
        # sorts every ended workload to page the newest: 0.2 s with 200,000 of them, 2 ms with
        # them (bench/history.py). PostgreSQL's autovacuum keeps its own, eventually: after a
        # large import, or with autovacuum off, a team lead's page took 112 ms against 3 ms.
        if self.dialect in ("sqlite", "postgresql"):
            with self.transaction():
                self._w().exec_driver_sql("ANALYZE workloads")

    def close(self) -> None:
        self._release_hold()
        self._unbind_calls()
        self.engine.dispose()
