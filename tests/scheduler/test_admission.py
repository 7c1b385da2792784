"""Admission: ordering, guarantees, borrowing, limits, lending, gangs — through the Scheduler API."""

from sched_helpers import cluster, job

from scheduler.model import ADMITTED, PENDING


def test_rank_then_fair_share_then_age():
    s = cluster(nodes=1, gpus=1, queues=[{"name": "a", "guaranteed": {"gpu": 1}},
                                          {"name": "b", "guaranteed": {"gpu": 0}}])
    old_batch = job(s, "a", kind="batch", now=0)
    training = job(s, "b", kind="training", now=5)
    order = [w.id for w in s.engine.order()]
    assert order == [training.id, old_batch.id]           # rank beats age
    # Fair share: queue a has used a GPU for an hour; b has not. Same class and age → b first.
    s2 = cluster(nodes=1, gpus=2)
    hog = job(s2, "a", now=0)
    s2.cycle(now=0)
    s2.mark_finished(hog.id, now=3600)
    wa = job(s2, "a", gpus=2, now=3600)
    wb = job(s2, "b", gpus=2, now=3601)                    # younger, but its team used less
    assert [w.id for w in s2.engine.order()] == [wb.id, wa.id]
    # Equal everything: age decides.
    s3 = cluster(nodes=1, gpus=2)
    first, second = job(s3, "a", now=0), job(s3, "a", now=1)
    assert [w.id for w in s3.engine.order()] == [first.id, second.id]


def test_within_guarantee_and_borrowing():
    s = cluster(nodes=1, gpus=8)   # a and b guaranteed 4 each
    w1 = job(s, "a", gpus=4)
    w2 = job(s, "a", gpus=2)       # borrows b's idle guarantee
    res = s.cycle(now=1)
    assert {w.id for w in res.admitted} == {w1.id, w2.id}
    assert s.state.tree.usage["a"]["gpu"] == 6


def test_non_preemptible_work_runs_only_inside_guarantee():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 2}},
                                          {"name": "b", "guaranteed": {"gpu": 2}}])
    nb1 = job(s, "a", gpus=2, kind="notebook")
    nb2 = job(s, "a", gpus=1, kind="notebook")
    res = s.cycle(now=1)
    assert [w.id for w in res.admitted] == [nb1.id]
    b = res.blockers[nb2.id]
    assert b.code == "guarantee_only"
    assert "interactive runs only inside guaranteed quota" in b.text() and "2/2" in b.text()


def test_queue_that_may_not_borrow_stays_in_its_guarantee():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 2}, "may_borrow": False},
                                          {"name": "b", "guaranteed": {"gpu": 2}}])
    job(s, "a", gpus=2)
    extra = job(s, "a", gpus=1)
    res = s.cycle(now=1)
    assert res.blockers[extra.id].code == "no_borrow"


def test_queue_limit_and_per_user_limit_with_numbers():
    s = cluster(nodes=2, gpus=8, queues=[
        {"name": "a", "guaranteed": {"gpu": 4}, "limit": {"gpu": 6}, "user_limit": {"gpu": 3},
         "user_limits": {"lead": {"gpu": 6}}},
        {"name": "b", "guaranteed": {"gpu": 4}}])
    u1 = job(s, "a", user="ada", gpus=3)
    u2 = job(s, "a", user="ada", gpus=1)          # ada over her 3
    l1 = job(s, "a", user="lead", gpus=3)
    l2 = job(s, "a", user="lead", gpus=1)         # queue at its limit of 6
    res = s.cycle(now=1)
    assert {w.id for w in res.admitted} == {u1.id, l1.id}
    ub, qb = res.blockers[u2.id], res.blockers[l2.id]
    assert ub.code == "user_limit" and "3/3" in ub.text()
    assert qb.code == "queue_limit" and "6/6" in qb.text() and "queue a" in qb.text()


def test_lending_limit_keeps_part_of_an_idle_guarantee():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 4}},
                                          {"name": "b", "guaranteed": {"gpu": 4}, "lending_limit": {"gpu": 1}}])
    big = job(s, "a", gpus=5)        # borrows 1 of b's 4: allowed (lends 1)
    more = job(s, "a", gpus=1)       # would eat b's unlent 3
    res = s.cycle(now=1)
    assert [w.id for w in res.admitted] == [big.id]
    assert res.blockers[more.id].code == "lending"
    # b itself can still use its kept guarantee at once.
    mine = job(s, "b", gpus=3, now=2)
    assert [w.id for w in s.cycle(now=3).admitted] == [mine.id]


def test_gang_is_all_or_nothing_across_nodes():
    s = cluster(nodes=3, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 24}}])
    filler = job(s, "a", gpus=4)
    s.cycle(now=1)
    gang = job(s, "a", gpus=8, workers=3, now=2)     # needs three whole nodes; one is half used
    res = s.cycle(now=3)
    assert gang.state == PENDING and gang.placement == [] and res.blockers[gang.id].code == "capacity"
    s.mark_finished(filler.id, now=4)
    res = s.cycle(now=5)
    assert gang.state == ADMITTED and sorted(a.node for a in gang.placement) == ["n0", "n1", "n2"]
    assert all(len(a.gpus) == 8 for a in gang.placement)


def test_a_limit_of_zero_is_a_limit_not_no_limit():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 0}, "limit": {"gpu": 0}},
                                          {"name": "b", "guaranteed": {"gpu": 4}, "user_limit": {"gpu": 0}}])
    assert s.state.tree.specs["a"].limit == {"gpu": 0}
    from scheduler import ValidationError
    import pytest
    with pytest.raises(ValidationError, match="limited to 0"):
        job(s, "a", gpus=1)
    with pytest.raises(ValidationError, match="your limit in queue 'b' is 0"):
        job(s, "b", gpus=1)
    cpu_only = s.submit({"user": "u", "queue": "a", "kind": "batch", "resources": {"cpu": 1}}, now=0)
    assert cpu_only.state == "pending"
