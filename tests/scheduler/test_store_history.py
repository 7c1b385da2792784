"""A long history in SQLite: once the store has refreshed its planner statistics, the newest
page of ended work is read through the ``seq`` index, not by sorting every ended workload
(what SQLite does without statistics, taking the ended states for a rare filter)."""

from __future__ import annotations

from sqlalchemy import insert, select
from store_helpers import wl

from scheduler.model import PENDING, TERMINAL
from scheduler.store import tables as T
from scheduler.store.sql import SqlStore


def plan(store: SqlStore) -> str:
    wl_ = T.workloads
    q = select(wl_.c.data).where(wl_.c.state.in_(TERMINAL)).order_by(wl_.c.seq.desc()).limit(100)
    sql = str(q.compile(store.engine, compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        return " / ".join(r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))


def test_newest_ended_work_is_paged_by_index_once_statistics_are_fresh(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path / 'h.sqlite'}")
    rows = [wl(i, state=TERMINAL[i % 3] if i % 50 else PENDING, user=f"u{i % 40}") for i in range(1, 5001)]
    with store.engine.begin() as conn:
        conn.execute(insert(T.workloads), [
            {"id": w.id, "seq": w.seq, "user": w.user, "queue": w.queue, "kind": w.kind, "priority": w.priority,
             "state": w.state, "submitted_at": w.submitted_at, "ended_at": None, "data": w.to_dict()}
            for w in rows])
    before = plan(store)
    assert "TEMP B-TREE FOR ORDER BY" in before, before       # every ended row sorted for a page
    store.refresh_statistics()
    after = plan(store)
    assert "TEMP B-TREE" not in after and "ix_workloads_seq" in after, after
    page = store.get_workloads(states=TERMINAL, newest_first=True, limit=3)
    assert [w.seq for w in page] == [4999, 4998, 4997]      # 5000 is pending
    store.close()


def test_refresh_statistics_gives_the_planner_numbers_on_both_databases(store_url):
    store = SqlStore(store_url)
    with store.transaction():
        store.put_workloads([wl(i, state=TERMINAL[i % 3], user=f"u{i % 7}") for i in range(1, 301)])
    stats = ("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'workloads'" if store.dialect == "sqlite"
             else "SELECT count(*) FROM pg_stats WHERE tablename = 'workloads'")

    def counted() -> int:
        with store.engine.connect() as conn:
            if store.dialect == "sqlite" and not conn.exec_driver_sql(
                    "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").first():
                return 0
            return conn.exec_driver_sql(stats).scalar()

    if store.dialect == "sqlite":     # (PostgreSQL's autovacuum might analyze it by itself any time)
        assert counted() == 0
    store.refresh_statistics()
    assert counted() > 0
    store.close()
