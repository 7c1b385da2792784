"""Alembic migrations of the store against real SQLite and PostgreSQL databases:
the migrated schema is exactly the SQLAlchemy metadata, and downgrade works."""

from __future__ import annotations

import json

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from scheduler.model import RUNNING, Assignment, Workload
from scheduler.store.sql import SqlStore, alembic_config
from scheduler.store.tables import metadata

TABLES = {t.name for t in metadata.sorted_tables}


def run(engine, cmd, *args):
    with engine.begin() as conn:
        getattr(command, cmd)(alembic_config(conn), *args)


def diffs(engine):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                     "compare_server_default": True})
        return compare_metadata(ctx, metadata)


def current(engine):
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@pytest.fixture
def engine(store_url):
    e = create_engine(store_url)
    yield e
    e.dispose()


def test_upgrade_head_matches_metadata(engine):
    run(engine, "upgrade", "head")
    assert TABLES <= set(inspect(engine).get_table_names())
    assert diffs(engine) == []
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert current(engine) == head


def test_comparison_sees_a_drift(engine):
    """The schema check is not vacuous: a dropped index shows up as a difference."""
    run(engine, "upgrade", "head")
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_workloads_state")
    assert any(d[0] == "add_index" and d[1].name == "ix_workloads_state" for d in diffs(engine))


def test_downgrade_to_base_and_upgrade_again(engine, store_url):
    run(engine, "upgrade", "head")
    run(engine, "downgrade", "base")
    assert set(inspect(engine).get_table_names()) & TABLES == set()
    assert current(engine) is None
    run(engine, "upgrade", "head")
    assert diffs(engine) == []
    s = SqlStore(store_url)     # and the store works on the re-created schema
    with s.transaction():
        s.put_workload(Workload("w1", 1, "u", "q", "batch", "preemptible", {"gpu": 1},
                                state=RUNNING, placement=[Assignment("n", (0,))]))
    assert [w.id for w in s.load().workloads] == ["w1"]
    s.close()


def test_store_migrates_on_open_and_is_idempotent(engine, store_url):
    SqlStore(store_url).close()
    assert diffs(engine) == []
    rev = current(engine)
    assert rev is not None
    SqlStore(store_url).close()     # opening again changes nothing
    assert current(engine) == rev and diffs(engine) == []


def test_in_memory_sqlite():
    s = SqlStore("sqlite://")
    assert diffs(s.engine) == []
    with s.transaction():
        s.put_workload(Workload("w1", 1, "u", "q", "batch", "preemptible", {}))
    assert s.load().next_seq == 2
    s.close()


def test_0002_gives_stored_ended_work_its_end_time(engine, store_url):
    """A database of the first schema with ended and live work: after the upgrade each ended
    workload has ``ended_at`` (from its data, else its submission), live ones none, and the
    store finds them by it."""
    run(engine, "upgrade", "0001")
    ws = [Workload("w1", 1, "u", "q", "batch", "preemptible", {"gpu": 1}, state="finished",
                   submitted_at=10.0, ended_at=50.0),
          Workload("w2", 2, "u", "q", "batch", "preemptible", {"gpu": 1}, state="rejected", submitted_at=20.0),
          Workload("w3", 3, "u", "q", "batch", "preemptible", {"gpu": 1}, state="pending", submitted_at=30.0)]
    with engine.begin() as conn:
        for w in ws:
            conn.exec_driver_sql(
                'INSERT INTO workloads (id, seq, "user", queue, kind, priority, state, submitted_at, data) '
                "VALUES (%s)" % ", ".join(["?" if engine.dialect.name == "sqlite" else "%s"] * 9),
                (w.id, w.seq, w.user, w.queue, w.kind, w.priority, w.state, w.submitted_at,
                 json.dumps(w.to_dict())))
    run(engine, "upgrade", "head")
    assert diffs(engine) == []
    with engine.connect() as conn:
        assert dict(conn.exec_driver_sql("SELECT id, ended_at FROM workloads").all()) == {
            "w1": 50.0, "w2": 20.0, "w3": None}
    run(engine, "downgrade", "0001")
    assert "ended_at" not in {c["name"] for c in inspect(engine).get_columns("workloads")}


def test_0003_keeps_work_stored_before_arrays_and_lists_an_arrays_tasks(engine, store_url):
    """Work stored before job arrays reads back as work submitted alone; after the upgrade one
    array's tasks, ended ones too, are found by the array's id (``get_workloads(array=...)``)."""
    run(engine, "upgrade", "0002")
    old = Workload("w1", 1, "u", "q", "batch", "preemptible", {"gpu": 1}, state="finished", submitted_at=1.0)
    data = old.to_dict()
    del data["array"]                        # the data as the schema before arrays wrote it
    with engine.begin() as conn:
        conn.exec_driver_sql(
            'INSERT INTO workloads (id, seq, "user", queue, kind, priority, state, submitted_at, data) '
            "VALUES (%s)" % ", ".join(["?" if engine.dialect.name == "sqlite" else "%s"] * 9),
            (old.id, old.seq, old.user, old.queue, old.kind, old.priority, old.state, old.submitted_at,
             json.dumps(data)))
    run(engine, "upgrade", "head")
    assert diffs(engine) == []
    s = SqlStore(store_url)
    tasks = [Workload(f"w{i}", i, "u", "q", "batch", "preemptible", {"gpu": 1}, state=state,
                      array={"id": "w2", "index": i - 2, "size": 2, "limit": 1})
             for i, state in ((2, "finished"), (3, "pending"))]
    with s.transaction():
        s.put_workloads(tasks)
    assert s.get_workload("w1").array is None
    assert [w.id for w in s.get_workloads(array="w2")] == ["w2", "w3"]
    assert [w.array["index"] for w in s.get_workloads(array="w2", states=("finished",))] == [0]
    assert (s.count_workloads(array="w2"), s.count_workloads(array="w1")) == (2, 0)
    s.close()
    run(engine, "downgrade", "0002")
    assert "array_id" not in {c["name"] for c in inspect(engine).get_columns("workloads")}


def test_0003_keeps_ledger_intervals_recorded_before_arrays(engine, store_url):
    run(engine, "upgrade", "0002")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            'INSERT INTO allocations (workload_id, "user", queue, flavor, gpus, start, "end") VALUES (%s)'
            % ", ".join(["?" if engine.dialect.name == "sqlite" else "%s"] * 7), ("w1", "u", "q", "any", 2, 0.0, 3600.0))
    run(engine, "upgrade", "head")
    assert diffs(engine) == []
    s = SqlStore(store_url)
    assert [(a.workload_id, a.array_id) for a in s.get_allocations()] == [("w1", None)]
    s.close()
    run(engine, "downgrade", "0002")
    assert "array_id" not in {c["name"] for c in inspect(engine).get_columns("allocations")}
