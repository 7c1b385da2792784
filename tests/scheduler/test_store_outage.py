"""The scheduler on a real PostgreSQL server that goes away: memory never runs ahead of the
database. A server of its own per test (the ``own_pg`` fixture), halted and resumed on the same port:
nothing is emulated. Moments inside a transaction are reached with SQLAlchemy's ``commit``
event (it runs just before COMMIT is sent).

- The server dies as a cycle commits: the cycle's decisions are not durable, and the store
  cannot be read back to undo them. Memory is marked stale: reads and changes raise
  ``StoreUnavailable`` until the server is back, then memory is the database's again.
- The server is down before a change begins: nothing changes in memory and reads go on.
- The connection is killed during COMMIT: the failure is ``in_doubt``; memory is rebuilt
  from the database at once.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import event, select

from scheduler import Scheduler, StoreUnavailable
from scheduler.model import ADMITTED, AWAITING_APPROVAL, PENDING, RUNNING
from scheduler.store import tables as T
from scheduler.store.sql import SqlStore

pytestmark = pytest.mark.postgres



def cluster(url: str) -> Scheduler:
    s = Scheduler(SqlStore(url))
    s.put_node({"name": "n0", "gpus": 4}, now=0)
    s.put_queue({"name": "a", "approval_above": {"gpu": 3}, "idle": {"warn_after": 60, "release_after": 3600}},
                now=0)
    return s


def job(s, gpus=2, now=1.0):
    return s.submit({"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": gpus}}, now=now)


def on_next_commit(store, action):
    armed = [action]

    def fire(conn):             # stays listening (removing it while it runs is refused), fires once
        if armed:
            armed.pop()(conn)
    event.listen(store.engine, "commit", fire)


def stored(url):
    """(states by id, GPU assignments) as the database has them, read afresh."""
    st = SqlStore(url, migrate=False)
    try:
        with st.engine.connect() as c:
            ga = sorted(tuple(r) for r in c.execute(select(T.gpu_assignments.c.node, T.gpu_assignments.c.gpu_index,
                                                           T.gpu_assignments.c.workload_id)))
        return {w.id: w.state for w in st.get_workloads()}, ga
    finally:
        st.close()


def in_memory(s):
    return ({w.id: w.state for w in s.workloads()},
            sorted((a.node, i, w.id) for w in s.state.holding.values() for a in w.placement for i in a.gpus))


def test_the_server_dies_as_a_cycle_commits_and_memory_waits_for_it(own_pg):
    url = own_pg.create_database()
    s = cluster(url)
    w = job(s)
    on_next_commit(s.store, lambda conn: own_pg.halt())
    with pytest.raises(StoreUnavailable) as e:
        s.cycle(now=2)
    assert e.value.in_doubt                      # it failed while committing
    # The decision to admit w is not durable and cannot be undone from the database: nobody
    # sees it, and nothing else is decided on memory that may be wrong.
    assert s.stale
    for read in (lambda: s.get(w.id), lambda: s.workloads(), lambda: s.cycle(now=3), lambda: s.cancel(w.id)):
        with pytest.raises(StoreUnavailable):
            read()
    assert s.stale

    own_pg.resume()                                  # the same server again; the service was never restarted
    assert s.get(w.id).state == PENDING and s.get(w.id).placement == []
    assert not s.stale
    assert in_memory(s) == stored(url) == ({w.id: PENDING}, [])
    s.cycle(now=4)                               # scheduling goes on, and is durable
    assert s.get(w.id).state == ADMITTED
    assert in_memory(s) == stored(url) == ({w.id: ADMITTED}, [("n0", 0, w.id), ("n0", 1, w.id)])
    s.store.close()


def test_a_change_that_cannot_begin_leaves_memory_as_it_was(own_pg):
    url = own_pg.create_database()
    s = cluster(url)
    running, admitted = job(s), job(s, gpus=1)
    big = job(s, gpus=4)                         # above the approval threshold
    assert big.state == AWAITING_APPROVAL
    s.cycle(now=2)
    s.mark_running(running.id, now=3)
    queued = job(s, gpus=1, now=4)               # room for it: the next cycle would admit it
    before = in_memory(s)
    own_pg.halt()
    attempts = [lambda: s.cycle(now=5), lambda: s.mark_running(admitted.id, now=5),
                lambda: s.annotate(admitted.id, {"message": "up"}, now=5),
                lambda: s.report_checkpoint(running.id, now=5), lambda: s.report_idle(running.id, 0, now=100),
                lambda: s.report_idle(running.id, 0, now=4000),
                lambda: s.mark_finished(running.id, now=5), lambda: s.cancel(queued.id, now=5),
                lambda: s.decide(big.id, True, now=5), lambda: job(s, now=5)]
    for attempt in attempts:
        with pytest.raises(StoreUnavailable) as e:
            attempt()
        assert not e.value.in_doubt and not s.stale
        assert in_memory(s) == before            # reads go on, from what is durable
    r = s.get(running.id)
    assert s.get(admitted.id).metadata.get("status") is None and r.checkpointed_at is None
    assert r.idle_warned_at is None and r.exit_code is None and r.state == RUNNING
    assert s.get(admitted.id).state == ADMITTED and s.get(big.id).state == AWAITING_APPROVAL

    own_pg.resume()
    assert in_memory(s) == stored(url) == before
    s.mark_running(admitted.id, now=6)
    s.cycle(now=7)
    assert s.get(admitted.id).state == RUNNING and s.get(queued.id).state == ADMITTED
    assert in_memory(s) == stored(url)
    s.store.close()


def test_a_connection_killed_during_commit_is_in_doubt_and_memory_follows_the_database(own_pg):
    url = own_pg.create_database()
    s = cluster(url)
    first = job(s)

    def kill(conn):                              # the backend of this very transaction
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with psycopg.connect(host="127.0.0.1", port=own_pg.port, user="postgres", dbname="postgres",
                             autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))

    on_next_commit(s.store, kill)
    with pytest.raises(StoreUnavailable) as e:
        s.submit_many([{"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}}], now=2)
    assert e.value.in_doubt and not s.stale      # the server is up: memory was rebuilt at once
    assert in_memory(s) == stored(url) == ({first.id: PENDING}, [])

    on_next_commit(s.store, kill)
    with pytest.raises(StoreUnavailable) as e:
        s.cycle(now=3)
    assert e.value.in_doubt and not s.stale
    assert in_memory(s) == stored(url) == ({first.id: PENDING}, [])

    again = job(s, now=4)                        # the pool replaced the killed connection
    assert again.seq > first.seq + 1             # the id of the lost batch is not handed out again
    s.cycle(now=5)
    assert in_memory(s) == stored(url)
    assert s.get(first.id).state == ADMITTED
    s.store.close()
