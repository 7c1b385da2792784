"""Scheduler cycles stored in a real database (SQLite and PostgreSQL through ``store_url``):
what one cycle changes is written as one transaction, whatever order it changed it in."""

from __future__ import annotations

from sqlalchemy import select

from scheduler import EngineConfig, Scheduler
from scheduler.model import ADMITTED
from scheduler.store import tables as T
from scheduler.store.sql import SqlStore


def test_a_cycle_whose_moved_work_lands_where_other_moved_work_was_is_stored(store_url):
    # Victims released at once (release_on_preempt, as in replay). A 2 x 4 gang gets n0 and n1
    # by moving x off n0 and y off n1 (consolidation); the GPU it leaves on n1 is y's old GPU 7,
    # and best fit puts x there, y on n2. Stored one workload after another, x's new GPU was
    # written while y still held it, and the database refused the whole cycle.
    s = Scheduler(SqlStore(store_url), config=EngineConfig(release_on_preempt=True, preempt_for_shorter=0))
    for n in ("n0", "n1", "n2"):
        s.put_node({"name": n, "gpus": 8, "cpu": 64, "memory": "256Gi", "labels": {"slot": n}}, now=0)
    s.put_queue({"name": "all", "guaranteed": {"gpu": 24}}, now=0)

    def start(gpus, on=None, workers=1, now=0.0):
        spec = {"user": "ada", "queue": "all", "kind": "training", "resources": {"gpu": gpus}, "workers": workers}
        if on:      # pinned, and never moved (inference is not preemptible)
            spec.update(node_selector={"slot": on}, priority="inference")
        w = s.submit(spec, now=now)
        s.cycle(now=now)
        return w

    start(3, on="n1")
    gap = start(3, on="n1")
    y = start(2)
    start(4, on="n0")
    x = start(1)
    start(6, on="n2")
    s.mark_finished(gap.id, now=10)
    assert [(w.placement[0].node, w.placement[0].gpus) for w in (x, y)] == [("n0", (4,)), ("n1", (6, 7))]

    gang = start(4, workers=2, now=1000)
    assert gang.state == ADMITTED and sorted(a.node for a in gang.placement) == ["n0", "n1"]
    assert [(w.placement[0].node, w.placement[0].gpus) for w in (x, y)] == [("n1", (7,)), ("n2", (6, 7))]
    assert x.metadata["moved_for"] == gang.id == y.metadata["moved_for"]
    stored = SqlStore(store_url)
    try:
        assert {(w.id, w.state, tuple((a.node, a.gpus) for a in w.placement))
                for w in stored.get_workloads(states=(ADMITTED,))} >= {
            (x.id, ADMITTED, (("n1", (7,)),)), (y.id, ADMITTED, (("n2", (6, 7)),))}
        with stored.engine.connect() as c:      # every GPU is held once, as in memory
            rows = sorted(tuple(r) for r in c.execute(select(T.gpu_assignments.c.node, T.gpu_assignments.c.gpu_index,
                                                               T.gpu_assignments.c.workload_id)))
        assert rows == sorted((a.node, i, w.id) for w in s.state.holding.values() for a in w.placement
                              for i in a.gpus)
        assert len(rows) == 24
    finally:
        stored.close()
        s.store.close()
