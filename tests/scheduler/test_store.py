"""SqlStore against real databases: SQLite (file, WAL) and PostgreSQL (a real
server started by the ``pg_server`` fixture). Nothing is emulated.

``store_url`` runs each test on both; ``test_store_parity`` checks SqlStore against
MemoryStore, the reference behaviour of the ``Store`` interface.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.exc import IntegrityError
from store_helpers import dump, held, snap, wl

from scheduler import model as M
from scheduler.model import (ADMITTED, FINISHED, PENDING, PREEMPTING, RUNNING, Allocation, Event,
                             IdlePolicy, NodeSpec, PriorityClass, QueueSpec)
from scheduler.store import MemoryStore, open_store
from scheduler.store.sql import SqlStore


@pytest.fixture
def store(store_url):
    s = SqlStore(store_url)
    yield s
    s.close()


def test_sqlite_is_durable_and_wal(tmp_path):
    s = SqlStore(f"sqlite:///{tmp_path / 'x.sqlite'}")
    with s.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 2   # FULL
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
    s.close()


def test_open_store_gives_sql_store(store_url):
    s = open_store(store_url)
    assert isinstance(s, SqlStore)
    s.close()


def test_round_trip_every_entity(store_url):
    s = SqlStore(store_url)
    q = QueueSpec("team-a", parent="org", guaranteed={"gpu": 8}, limit={"gpu": 16}, weight=2.5,
                  may_borrow=False, lending_limit={"gpu": 4}, user_limit={"gpu": 2},
                  user_limits={"bob": {"gpu": 6}}, idle=IdlePolicy(600.0, 1800.0), description="A")
    org = QueueSpec("org")
    classes = M.default_classes()
    node = NodeSpec("n1", gpus=8, gpu_model="a100", cpu=64000, memory=2**40,
                    labels={"zone": "z1"}, healthy=False, draining=True, gpu_memory=80 * 2**30)
    running = wl(2, RUNNING, [("n1", [0, 1]), ("n2", [3])], workers=2, gpu_model="a100",
                 node_selector={"zone": "z1"}, time_limit=3600.0, name="train", admitted_at=5.5,
                 started_at=6.25, preemptions=1, reason="r", idle_warned_at=7.0,
                 metadata={"image": "x", "nested": {"a": [1, 2]}})
    pending = wl(1)
    done = wl(3, FINISHED, [("n1", [2])], ended_at=9.0, exit_code=0)
    usage = {"team-a": {"gpu": 1.5, "cpu": 0.25}, "user:alice": {"gpu": 3.0}}
    with s.transaction():
        for x in (q, org):
            s.put_queue(x)
        for c in classes:
            s.put_class(c)
        s.put_node(node)
        for w in (running, pending, done):
            s.put_workload(w)
        s.put_fairshare(42.5, usage)
        s.set_meta("k", "v")
    s.close()

    s = SqlStore(store_url)   # a new store on the same database
    sn = s.load()
    assert [x.to_dict() for x in sn.queues] == [org.to_dict(), q.to_dict()]
    assert isinstance(sn.queues[1].idle, IdlePolicy)
    assert sorted(c.to_dict()["name"] for c in sn.classes) == sorted(c.name for c in classes)
    assert {c.name: c.to_dict() for c in sn.classes} == {c.name: c.to_dict() for c in classes}
    assert [n.to_dict() for n in sn.nodes] == [node.to_dict()]
    assert dump(sn.workloads) == dump([pending, running])          # not terminal, by seq
    assert sn.workloads[1].placement[0].gpus == (0, 1)
    assert sn.fairshare_time == 42.5 and sn.fairshare == usage
    assert sn.next_seq == 4
    assert s.get_workload("w3").to_dict() == done.to_dict()
    assert s.get_workload("nope") is None
    assert s.get_meta("k") == "v" and s.get_meta("missing") is None

    with s.transaction():
        s.delete_queue("org")
        s.delete_class("training")
        s.delete_node("n1")
        s.delete_node("not-there")
        s.put_fairshare(50.0, {})
    sn = s.load()
    assert [x.name for x in sn.queues] == ["team-a"]
    assert "training" not in {c.name for c in sn.classes}
    assert sn.nodes == [] and sn.fairshare == {} and sn.fairshare_time == 50.0
    s.close()


def test_empty_store(store):
    sn = store.load()
    assert (sn.queues, sn.classes, sn.nodes, sn.workloads) == ([], [], [], [])
    assert sn.fairshare_time is None and sn.fairshare == {} and sn.next_seq == 1


def test_next_seq_counts_terminal_workloads(store):
    with store.transaction():
        store.put_workload(wl(7))
        store.put_workload(wl(41, FINISHED))
    sn = store.load()
    assert [w.seq for w in sn.workloads] == [7]
    assert sn.next_seq == 42


def test_exception_rolls_back_everything(store):
    with store.transaction():
        store.put_queue(QueueSpec("keep"))
    with pytest.raises(ZeroDivisionError):
        with store.transaction():
            store.put_queue(QueueSpec("q"))
            store.put_class(PriorityClass("c", 1))
            store.put_node(NodeSpec("n", gpus=2))
            store.put_workload(wl(1, RUNNING, [("n", [0])]))
            store.add_event(Event(1.0, "submitted", "w1"))
            store.open_allocation(Allocation("w1", "alice", "q", "any", 1, 1.0))
            store.put_fairshare(1.0, {"q": {"gpu": 1.0}})
            store.delete_queue("keep")
            assert store.get_workload("w1") is not None   # reads see the open transaction
            1 / 0
    sn = store.load()
    assert [q.name for q in sn.queues] == ["keep"]
    assert (sn.classes, sn.nodes, sn.workloads, sn.fairshare) == ([], [], [], {})
    assert sn.next_seq == 1
    assert store.get_events() == [] and store.get_allocations() == []
    assert not held(store, "n", 0)


def test_new_workloads_and_events_in_one_go(store_url):
    """The group-commit writes: many rows per statement, the same result as one by one,
    and an id already stored is refused (never overwritten) on both stores."""
    for s in (SqlStore(store_url), MemoryStore()):
        with s.transaction():
            s.add_new_workloads([wl(1), wl(2, user="bob")])
            s.add_events([Event(5.0, "submitted", "w1", "", {"user": "alice"}),
                          Event(5.0, "submitted", "w2", "", {"user": "bob"})])
        assert [(w.id, w.user) for w in s.get_workloads()] == [("w1", "alice"), ("w2", "bob")]
        assert [(e.workload_id, e.data) for e in s.get_events()] == [
            ("w1", {"user": "alice"}), ("w2", {"user": "bob"})]
        with pytest.raises((IntegrityError, ValueError)):
            with s.transaction():
                s.add_new_workloads([wl(3), wl(1, user="mallory")])
        assert [(w.id, w.user) for w in s.get_workloads()] == [("w1", "alice"), ("w2", "bob")]
        if isinstance(s, SqlStore):
            with pytest.raises(RuntimeError, match="transaction"):
                s.add_new_workloads([wl(4)])
            s.close()


def test_nested_transactions_join_the_outer_one(store):
    with pytest.raises(KeyError):
        with store.transaction():
            with store.transaction():
                store.put_queue(QueueSpec("inner"))
            store.put_queue(QueueSpec("outer"))
            raise KeyError
    assert store.load().queues == []
    with store.transaction():
        with store.transaction():
            store.put_queue(QueueSpec("inner"))
        store.put_queue(QueueSpec("outer"))
    assert [q.name for q in store.load().queues] == ["inner", "outer"]


def test_writes_outside_a_transaction_are_refused(store):
    writes = [
        lambda: store.put_queue(QueueSpec("q")), lambda: store.delete_queue("q"),
        lambda: store.put_class(PriorityClass("c", 1)), lambda: store.delete_class("c"),
        lambda: store.put_node(NodeSpec("n")), lambda: store.delete_node("n"),
        lambda: store.put_workload(wl(1)), lambda: store.add_event(Event(1.0, "x")),
        lambda: store.open_allocation(Allocation("w1", "u", "q", "any", 1, 0.0)),
        lambda: store.close_allocation("w1", 1.0), lambda: store.put_fairshare(1.0, {}),
        lambda: store.set_meta("k", "v"),
    ]
    for write in writes:
        with pytest.raises(RuntimeError, match="transaction"):
            write()
    assert store.load().queues == [] and store.get_workloads() == [] and store.get_events() == []


def test_a_gpu_cannot_be_held_twice(store):
    with store.transaction():
        store.put_workload(wl(1, RUNNING, [("n1", [0, 1])]))
        store.put_workload(wl(2, PENDING, [("n1", [0])]))   # pending holds nothing
    with pytest.raises(IntegrityError):
        with store.transaction():
            store.put_queue(QueueSpec("written-before-the-clash"))
            store.add_event(Event(1.0, "admitted", "w3"))
            store.put_workload(wl(3, ADMITTED, [("n1", [1, 2])]))
    assert store.get_workload("w3") is None
    assert store.load().queues == [] and store.get_events() == []
    assert held(store, "n1", 0) and held(store, "n1", 1)
    assert not held(store, "n1", 2) and not held(store, "n2", 0)
    # PREEMPTING still holds: a victim keeps its GPUs until it has stopped.
    with store.transaction():
        store.put_workload(wl(1, PREEMPTING, [("n1", [0, 1])]))
    assert held(store, "n1", 0)
    # Within one workload, the same GPU twice is a clash too.
    with pytest.raises(IntegrityError):
        with store.transaction():
            store.put_workload(wl(4, RUNNING, [("n3", [0]), ("n3", [0])]))


def test_release_and_move_free_the_gpus(store):
    with store.transaction():
        store.put_workload(wl(1, RUNNING, [("n1", [0, 1])]))
    with store.transaction():
        store.put_workload(wl(1, RUNNING, [("n1", [1, 2])]))   # moved: GPU 0 freed, 2 taken
    assert not held(store, "n1", 0) and held(store, "n1", 1) and held(store, "n1", 2)
    with store.transaction():
        store.put_workload(wl(1, FINISHED, [("n1", [1, 2])]))
        store.put_workload(wl(2, ADMITTED, [("n1", [0, 1, 2])]))   # same transaction: fine
    assert held(store, "n1", 0)
    with store.transaction():
        store.put_workload(wl(2, PENDING))                          # requeued
    assert not any(held(store, "n1", g) for g in range(3))


def test_event_queries(store):
    evs = [Event(10.0, "submitted", "w1", "hi", {"a": 1}), Event(11.0, "admitted", "w1"),
           Event(11.0, "submitted", "w2"), Event(12.5, "queue-changed", None, "admin", {"q": "x"}),
           Event(20.0, "finished", "w1", data={"exit": 0})]
    with store.transaction():
        for e in evs:
            store.add_event(e)
    ids = [e.id for e in evs]
    assert all(isinstance(i, int) for i in ids) and ids == sorted(set(ids))
    got = store.get_events()
    assert [e.to_dict() for e in got] == [e.to_dict() for e in evs]
    assert [e.id for e in store.get_events(workload_id="w1")] == [ids[0], ids[1], ids[4]]
    assert [e.id for e in store.get_events(since=11.0, until=20.0)] == ids[1:4]   # [since, until)
    assert [e.id for e in store.get_events(since=12.5)] == ids[3:]
    assert [e.id for e in store.get_events(until=11.0)] == ids[:1]
    assert [e.id for e in store.get_events(kinds=("submitted", "finished"))] == [ids[0], ids[2], ids[4]]
    assert [e.id for e in store.get_events(kinds=())] == []
    assert [e.id for e in store.get_events(workload_id="w1", kinds=("submitted",), since=10.0)] == ids[:1]
    assert [e.id for e in store.get_events(limit=2)] == ids[:2]
    assert [e.id for e in store.get_events(since=11.0, limit=1)] == ids[1:2]


def test_allocation_queries_and_closing(store):
    with store.transaction():
        store.open_allocation(Allocation("w1", "alice", "team-a", "a100", 2, 0.0))
        store.open_allocation(Allocation("w2", "bob", "team-b", "any", 1, 10.0))
        store.open_allocation(Allocation("w3", "bob", "team-b", "h100", 8, 30.0))
    with store.transaction():
        store.close_allocation("w1", 20.0)
        store.close_allocation("w2", 25.0)
        store.close_allocation("nope", 25.0)
    with store.transaction():   # reopened (requeued, admitted again), then closed again
        store.open_allocation(Allocation("w2", "bob", "team-b", "any", 1, 40.0))
    with store.transaction():
        store.close_allocation("w2", 50.0)
        store.close_allocation("w2", 99.0)      # already closed: nothing changes
    all_ = store.get_allocations()
    assert [(a.workload_id, a.start, a.end) for a in all_] == [
        ("w1", 0.0, 20.0), ("w2", 10.0, 25.0), ("w3", 30.0, None), ("w2", 40.0, 50.0)]
    assert all_[0] == Allocation("w1", "alice", "team-a", "a100", 2, 0.0, 20.0)
    win = lambda s, e: [(a.workload_id, a.start) for a in store.get_allocations(s, e)]  # noqa: E731
    assert win(20.0, 30.0) == [("w2", 10.0)]            # w1 ends at 20: outside [20, 30)
    assert win(19.0, 30.0) == [("w1", 0.0), ("w2", 10.0)]
    assert win(30.0, None) == [("w3", 30.0), ("w2", 40.0)]
    assert win(None, 10.0) == [("w1", 0.0)]             # w2 starts at 10: outside
    assert win(100.0, 200.0) == [("w3", 30.0)]          # still open


def test_reopen_sees_committed_state_only(store_url):
    a = SqlStore(store_url)
    with a.transaction():
        a.put_queue(QueueSpec("q"))
        a.put_workload(wl(1, RUNNING, [("n1", [0])]))
        a.add_event(Event(1.0, "admitted", "w1"))
    with pytest.raises(ValueError):
        with a.transaction():
            a.put_workload(wl(2, PENDING))
            raise ValueError
    b = SqlStore(store_url)
    assert snap(b) == snap(a)
    assert [w.id for w in b.load().workloads] == ["w1"] and b.load().next_seq == 2
    assert [e.kind for e in b.get_events()] == ["admitted"]
    assert held(b, "n1", 0)
    with b.transaction():       # and the first store sees what the second commits
        b.put_workload(wl(2, PENDING))
    assert a.get_workload("w2") is not None
    a.close()
    b.close()


def test_concurrent_writers_from_two_stores(store_url):
    """Two stores (as two processes would) write at once: each write transaction
    waits for the other instead of failing, and nothing is lost."""
    stores = [SqlStore(store_url), SqlStore(store_url)]
    errors = []

    def writer(k: int):
        try:
            s = stores[k]
            for i in range(40):
                with s.transaction():
                    n = len(s.get_events(workload_id=f"k{k}"))
                    s.add_event(Event(float(i), "tick", f"k{k}", data={"n": n}))
                    s.put_workload(wl(k * 1000 + i + 1, RUNNING, [(f"node{k}", [i])]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for k in range(2):
        assert [e.data["n"] for e in stores[0].get_events(workload_id=f"k{k}")] == list(range(40))
    assert len(stores[1].load().workloads) == 80
    for s in stores:
        s.close()


def test_a_large_transaction(store):
    """Thousands of writes in one transaction (a big scheduling cycle) land together."""
    with store.transaction():
        for i in range(1, 2001):
            store.put_workload(wl(i, RUNNING, [(f"n{i // 8}", [i % 8])]))
            store.add_event(Event(float(i), "admitted", f"w{i}"))
    assert len(store.load().workloads) == 2000
    assert len(store.get_events(kinds=("admitted",))) == 2000
    assert held(store, "n250", 0) and not held(store, "n250", 1)


def test_newest_events_first_with_a_limit(store_url):
    from scheduler.model import Event
    from scheduler.store.sql import SqlStore

    for store in (SqlStore(store_url), MemoryStore()):
        with store.transaction():
            for i in range(5):
                store.add_event(Event(float(i), "k", None, str(i)))
        got = [e.reason for e in store.get_events(limit=2, newest_first=True)]
        assert got == ["4", "3"]
        assert [e.reason for e in store.get_events(limit=2)] == ["0", "1"]
        assert store.last_event_id() == 5
