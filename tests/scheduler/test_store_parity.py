"""SqlStore against MemoryStore, the reference behaviour of the ``Store`` interface: the same
random sequence of writes applied to both (SQLite and PostgreSQL through ``store_url``) must
read back the same, through every query."""

from __future__ import annotations

import random

import pytest
from store_helpers import dump, snap, wl

from scheduler import model as M
from scheduler.model import (ADMITTED, FINISHED, PENDING, PREEMPTING, RUNNING, Allocation,
                             Assignment, Event, NodeSpec, PriorityClass, QueueSpec, Workload)
from scheduler.store import MemoryStore
from scheduler.store.sql import SqlStore


def random_ops(seed: int, n: int = 400):
    """A reproducible sequence of (method, args) calls that never double-books a GPU."""
    rnd = random.Random(seed)
    users, queues = ["alice", "bob", "carol"], ["team-a", "team-b", "org"]
    states = [PENDING, ADMITTED, RUNNING, PREEMPTING, FINISHED, M.FAILED, M.CANCELLED]
    gpus = {f"n{i}": set(range(4)) for i in range(3)}
    live: dict[str, Workload] = {}
    ops, t, seq = [], 0.0, 0
    for _ in range(n):
        t += rnd.choice([0.0, 0.5, 1.0, 3.0])
        r = rnd.random()
        if r < 0.06:
            ops.append(("put_queue", QueueSpec(rnd.choice(queues), weight=rnd.choice([1.0, 2.0]),
                                               guaranteed={"gpu": rnd.randint(1, 8)})))
        elif r < 0.08:
            ops.append(("delete_queue", rnd.choice(queues)))
        elif r < 0.11:
            ops.append(("put_class", PriorityClass(rnd.choice(["a", "b", "c"]), rnd.randint(1, 9))))
        elif r < 0.12:
            ops.append(("delete_class", rnd.choice(["a", "b", "c"])))
        elif r < 0.15:
            ops.append(("put_node", NodeSpec(rnd.choice(list(gpus)), gpus=4, healthy=rnd.random() < .8)))
        elif r < 0.16:
            ops.append(("delete_node", rnd.choice(list(gpus))))
        elif r < 0.35 or not live:
            seq += 1
            w = wl(seq, user=rnd.choice(users), queue=rnd.choice(queues), submitted_at=t,
                   kind=rnd.choice(("training", "training", "notebook")))
            live[w.id] = w
            ops.append(("put_workload", w))
        elif r < 0.6:
            w = Workload.from_dict(live[rnd.choice(sorted(live))].to_dict())
            old = [(a.node, g) for a in w.placement for g in a.gpus] if w.state in M.HOLDING else []
            for node, g in old:
                gpus[node].add(g)
            w.state = rnd.choice(states)
            w.placement = []
            if w.state in M.HOLDING:
                node = rnd.choice(list(gpus))
                take = sorted(rnd.sample(sorted(gpus[node]), min(len(gpus[node]), rnd.randint(0, 2))))
                gpus[node] -= set(take)
                w.placement = [Assignment(node, tuple(take))]
            if w.state in M.TERMINAL:
                w.ended_at = t
                del live[w.id]
            else:
                live[w.id] = w
            ops.append(("put_workload", w))
        elif r < 0.8:
            ops.append(("add_event", Event(t, rnd.choice(["submitted", "admitted", "tick"]),
                                           rnd.choice([None, *sorted(live)[:3]]), "r", {"t": t})))
        elif r < 0.88:
            w = live[rnd.choice(sorted(live))]
            ops.append(("open_allocation", Allocation(w.id, w.user, w.queue, "any", 1, t)))
        elif r < 0.95:
            ops.append(("close_allocation", rnd.choice(sorted(live) + ["w1"]), t))
        else:
            ops.append(("put_fairshare", t, {q: {"gpu": rnd.random()} for q in queues[:rnd.randint(0, 3)]}))
    return ops, t


def apply(store, ops, chunk: int = 25):
    for i in range(0, len(ops), chunk):
        with store.transaction():
            for name, *args in ops[i:i + chunk]:
                # Fresh copies: MemoryStore keeps (and sets ids on) the objects it is given.
                args = [Workload.from_dict(a.to_dict()) if isinstance(a, Workload)
                        else Event(**a.to_dict()) if isinstance(a, Event)
                        else Allocation(**a.to_dict()) if isinstance(a, Allocation) else a
                        for a in args]
                getattr(store, name)(*args)


@pytest.mark.parametrize("seed", [1, 2])
def test_parity_with_memory_store(store_url, seed):
    ops, t_end = random_ops(seed)
    mem, sql = MemoryStore(), SqlStore(store_url)
    apply(mem, ops)
    apply(sql, ops)
    assert snap(sql) == snap(mem)
    assert snap(SqlStore(store_url)) == snap(mem)
    for kw in [{}, {"user": "alice"}, {"queue": "team-b"}, {"states": (RUNNING, ADMITTED)},
               {"states": M.TERMINAL, "user": "bob", "limit": 3}, {"limit": 5}, {"states": ()},
               {"newest_first": True, "limit": 4, "offset": 2}, {"offset": 3},
               {"seen_by": ("alice", ("team-b",)), "newest_first": True},
               {"seen_by": (None, ("team-b", "gone"))}, {"seen_by": ("bob", ())},
               {"kinds": ("training", "batch"), "states": M.TERMINAL, "newest_first": True, "limit": 2}]:
        assert dump(sql.get_workloads(**kw)) == dump(mem.get_workloads(**kw)), kw
        count = {k: v for k, v in kw.items() if k not in ("limit", "offset", "newest_first")}
        assert sql.count_workloads(**count) == mem.count_workloads(**count) == len(
            mem.get_workloads(**count)), kw
    assert mem.count_workloads(seen_by=("alice", ("team-b",))) > mem.count_workloads(user="alice") > 0
    assert 0 < mem.count_workloads(kinds=("notebook",)) < mem.count_workloads()
    ids = sorted(w.id for w in mem.workloads.values())
    for wid in ids[:10] + ["missing"]:
        a, b = sql.get_workload(wid), mem.get_workload(wid)
        assert (a and a.to_dict()) == (b and b.to_dict())
    mid = t_end / 2
    for kw in [{}, {"since": mid}, {"until": mid}, {"since": mid / 2, "until": mid},
               {"kinds": ("tick",)}, {"workload_id": "w2"}, {"kinds": ("admitted",), "limit": 4},
               {"workload_id": "w1", "since": 1.0}]:
        assert [e.to_dict() for e in sql.get_events(**kw)] == [e.to_dict() for e in mem.get_events(**kw)], kw
    for s, e in [(None, None), (mid, None), (None, mid), (mid / 2, mid), (t_end + 1, None)]:
        assert sql.get_allocations(s, e) == mem.get_allocations(s, e), (s, e)
    assert len(mem.events) > 20 and len(mem.allocations) > 5 and len(ids) > 20   # not vacuous
    sql.close()


@pytest.mark.parametrize("seed", [3])
def test_purging_history_matches_memory_store_and_never_reuses_an_id(store_url, seed):
    """purge_history on both stores: the same rows go (ended work by its end, events by time,
    closed ledger intervals by their end), live work and open intervals stay, and the next
    id comes after every id ever used, even when the newest workload was purged."""
    ops, t_end = random_ops(seed)
    mem, sql = MemoryStore(), SqlStore(store_url)
    apply(mem, ops)
    apply(sql, ops)
    live_before = {w.id for w in mem.workloads.values() if w.state not in M.TERMINAL}
    top = max(w.seq for w in mem.workloads.values())
    ended = [w for w in mem.workloads.values() if w.state in M.TERMINAL]
    assert ended and live_before
    cut = t_end / 2
    kw = dict(workloads_before=cut, events_before=cut, allocations_before=cut)
    gone = sql.purge_history(**kw, batch=7)     # several batches
    assert gone == mem.purge_history(**kw) and min(gone.values()) > 0, gone
    assert snap(sql) == snap(mem)
    assert dump(sql.get_workloads()) == dump(mem.get_workloads())
    assert live_before <= {w.id for w in mem.get_workloads()}
    assert [e.to_dict() for e in sql.get_events()] == [e.to_dict() for e in mem.get_events()]
    assert all(e.time >= cut for e in sql.get_events()[:-1])
    assert [a.to_dict() for a in sql.get_allocations()] == [a.to_dict() for a in mem.get_allocations()]
    assert all(a.end is None or a.end >= cut for a in sql.get_allocations())
    # Everything ended goes, the newest included: the next id still comes after it.
    for s in (sql, mem):
        with s.transaction():
            for w in s.get_workloads(states=M.HOLDING + (M.PENDING, M.AWAITING_APPROVAL, M.PREEMPTING)):
                w.state, w.placement, w.ended_at = M.CANCELLED, [], t_end
                s.put_workload(w)
        last_event = s.last_event_id()
        s.purge_history(workloads_before=t_end + 1, events_before=t_end + 1)
        assert s.get_workloads() == [] and s.load().next_seq == top + 1
        assert [e.id for e in s.get_events()] == [last_event]
    assert SqlStore(store_url).load().next_seq == top + 1
