"""Preemption and reclaim: who may be a victim, when, how many — live and replay modes."""

import pytest
from sched_helpers import cluster, job

from scheduler.model import ADMITTED, PENDING, PREEMPTING


def test_higher_rank_preempts_lower_rank_in_its_own_queue_only_after_preempt_after():
    s = cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}}])
    batch = [job(s, "a", gpus=1, kind="batch") for _ in range(4)]
    s.cycle(now=0)
    d = s.state.classes["preemptible"].to_dict()
    d["preempt_after"] = 100
    s.put_class(d, now=0)
    train = job(s, "a", gpus=2, kind="training", now=10)
    res = s.cycle(now=50)
    assert res.preempted == [] and train.state == PENDING     # too young to preempt
    res = s.cycle(now=100)
    victims = [v.id for v, by in res.preempted]
    assert len(victims) == 2 and all(by.id == train.id for _, by in res.preempted)
    assert train.state == ADMITTED
    # Youngest first: equal start times → the latest submitted go.
    assert victims == [batch[3].id, batch[2].id]
    assert all(s.get(v).state == PENDING for v in victims)   # requeued, keeping their age
    # ... in the line's order; how long they have waited (metrics) restarts at their requeue.
    assert all(s.get(v).submitted_at == 0 and s.get(v).waiting_since == 100 for v in victims)
    assert batch[0].waiting_since == 0
    ev = s.events(workload_id=victims[0], kinds=("preempted",))
    assert ev and ev[0].data["preemptor"] == train.id and "higher priority class" in ev[0].reason


def test_non_preemptible_work_is_never_a_victim():
    s = cluster(nodes=1, gpus=2, queues=[{"name": "a", "guaranteed": {"gpu": 2}}])
    nb = job(s, "a", gpus=2, kind="notebook")
    s.cycle(now=0)
    svc = job(s, "a", gpus=1, kind="inference", now=1)   # inference ranks below interactive anyway
    top = s.put_class({"name": "urgent", "rank": 1000, "preemptible": False, "may_borrow": False}, now=1)
    urgent = job(s, "a", gpus=2, kind="training", priority=top.name, now=2)
    res = s.cycle(now=10_000)
    assert res.preempted == [] and nb.state == ADMITTED and urgent.state == PENDING and svc.state == PENDING


def test_reclaim_takes_borrowed_capacity_back_but_not_below_guarantee():
    s = cluster(nodes=2, gpus=8)     # a and b guaranteed 8 each
    b_jobs = [job(s, "b", user="bob", gpus=4, now=i) for i in range(4)]   # b borrows all of a's 8
    s.cycle(now=0)
    assert s.state.tree.usage["b"]["gpu"] == 16
    a1 = job(s, "a", gpus=4, now=700)
    a2 = job(s, "a", gpus=4, now=701)
    a3 = job(s, "a", gpus=4, now=702)        # beyond a's guarantee: borrowing, may not reclaim
    res = s.cycle(now=1000)
    assert {w.id for w in res.admitted} == {a1.id, a2.id}
    assert s.state.tree.usage["b"]["gpu"] == 8          # back at its guarantee, not below
    assert {v.id for v, _ in res.preempted} == {b_jobs[3].id, b_jobs[2].id}   # the youngest two
    assert a3.state == PENDING
    ev = s.events(workload_id=b_jobs[3].id, kinds=("preempted",))
    assert "above its guarantee" in ev[0].reason


def test_victims_are_chosen_on_one_node_to_keep_the_set_small():
    s = cluster(nodes=2, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}},
                                          {"name": "b", "guaranteed": {"gpu": 0}}])
    # b fills n0 with one 8-GPU job and n1 with eight 1-GPU jobs (the 1-GPU ones are younger).
    big = job(s, "b", user="bob", gpus=8, now=0)
    s.cycle(now=0)
    small = [job(s, "b", user="bob", gpus=1, now=1) for _ in range(8)]
    s.cycle(now=1)
    whole = job(s, "a", gpus=8, now=2000)
    res = s.cycle(now=2000)
    assert [v.id for v, _ in res.preempted] == [big.id]   # one victim instead of eight
    assert whole.state == ADMITTED
    assert all(w.state == ADMITTED for w in small)


def test_live_mode_waits_for_victims_to_stop_before_starting_the_preemptor():
    s = cluster(nodes=1, gpus=4, release=False, queues=[{"name": "a", "guaranteed": {"gpu": 2}},
                                                         {"name": "b", "guaranteed": {"gpu": 2}}])
    _, b2 = job(s, "b", user="bob", gpus=2, now=0), job(s, "b", user="bob", gpus=2, now=0)
    s.cycle(now=0)
    a1 = job(s, "a", gpus=1, now=700)
    a2 = job(s, "a", gpus=1, now=700)
    res = s.cycle(now=700)
    assert [v.id for v, _ in res.preempted] == [b2.id]       # one victim frees enough for both
    assert b2.state == PREEMPTING and a1.state == PENDING and a2.state == PENDING
    assert res.blockers[a1.id].code == res.blockers[a2.id].code == "waiting_preemption"
    assert "waiting for them to stop" in res.blockers[a1.id].text()
    res = s.cycle(now=701)                  # still stopping: no double allocation, no new victims
    assert res.admitted == [] and res.preempted == []
    s.mark_stopped(b2.id, now=705)
    assert b2.state == PENDING and b2.waiting_since == 705      # requeued: waits from when it stopped
    res = s.cycle(now=706)
    assert {w.id for w in res.admitted} == {a1.id, a2.id}
    kinds = [e.kind for e in s.events(workload_id=b2.id)]
    assert kinds == ["submitted", "admitted", "preempted", "stopped", "requeued"]


def test_reclaim_clears_the_node_that_borrowers_can_give_up_not_the_one_that_looks_closest():
    # One node (1 GPU free, three of b's jobs) looks closest to fitting a 4-GPU job, but b may
    # lose only 2 before it is back at its guarantee; c may lose 5, all four of its jobs on n1.
    s = cluster(nodes=3, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 6}},
                                          {"name": "b", "guaranteed": {"gpu": 1}},
                                          {"name": "c", "guaranteed": {"gpu": 1}}])
    old_c = [job(s, "c", user="cy", gpus=1, now=0) for _ in range(4)]
    s.cycle(now=0)
    [job(s, "a", gpus=1, now=100) for _ in range(2)]
    s.cycle(now=100)
    [job(s, "c", user="cy", gpus=1, now=150) for _ in range(2)]
    s.cycle(now=150)
    young_b = [job(s, "b", user="bob", gpus=1, now=200) for _ in range(3)]
    s.cycle(now=200)
    n1 = old_c[0].placement[0].node
    assert all(w.placement[0].node == n1 for w in old_c)
    assert len({w.placement[0].node for w in young_b} - {n1}) == 1
    owed = job(s, "a", gpus=4, now=300)               # a uses 2 of its 6: owed
    res = s.cycle(now=900)
    assert owed.state == ADMITTED and owed.placement[0].node == n1
    assert {v.id for v, _ in res.preempted} == {w.id for w in old_c}
    assert s.state.tree.usage["b"]["gpu"] == 3      # b untouched


def test_an_owed_gang_reclaims_the_node_it_lacks_not_the_youngest_borrowed_work():
    # b borrows 8 GPUs (16 of its 8): an old 8-GPU job alone on one node, and two young
    # 4-GPU jobs that share their nodes with c's work (c is at its guarantee). a's gang of
    # 2 × 8 is owed and one node is free. Taking the youngest first would spend b's 8 spare
    # GPUs on the two 4-GPU jobs and clear no node; the node-wise search takes the old job.
    s = cluster(nodes=4, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 16}},
                                         {"name": "b", "guaranteed": {"gpu": 8}},
                                         {"name": "c", "guaranteed": {"gpu": 8}}])
    old = job(s, "b", user="bob", gpus=8, now=0)
    s.cycle(now=0)
    young = []
    for t in (1, 3):
        job(s, "c", user="cy", gpus=4, now=t)
        s.cycle(now=t)
        young.append(job(s, "b", user="bob", gpus=4, now=t + 200))
        s.cycle(now=t + 200)
    nodes = {w.placement[0].node for w in young + [old]}
    assert len(nodes) == 3 and all(w.state == ADMITTED for w in young + [old])
    old_node = old.placement[0].node
    gang = job(s, "a", gpus=8, workers=2, now=400)
    res = s.cycle(now=1000)
    assert gang.state == ADMITTED and [v.id for v, _ in res.preempted] == [old.id]
    assert old.state == PENDING and old_node in {a.node for a in gang.placement}
    assert all(w.state == ADMITTED for w in young)
    assert s.state.tree.usage["b"]["gpu"] == 8          # back at its guarantee, not below


@pytest.mark.parametrize("small_owner", ["b", "c"])
def test_one_node_work_reclaims_a_gang_only_when_no_node_clears_without_one(small_owner):
    # A full cluster: two older 4-GPU jobs on n0 and b's young 2 × 8 gang on n1 and n2; b
    # borrows. a is owed 8. Its youngest candidate is the gang, and one gang worker's node alone
    # would fit it, but stopping the gang stops 16 GPUs. When the 4-GPU jobs are b's too
    # (borrowed) they are taken instead and the gang runs on; when they are c's (at its
    # guarantee) only the gang makes room, and it is stopped.
    s = cluster(nodes=3, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}},
                                         {"name": "b", "guaranteed": {"gpu": 8}},
                                         {"name": "c", "guaranteed": {"gpu": 8}}])
    small = [job(s, small_owner, user="bob", gpus=4, now=0) for _ in range(2)]
    s.cycle(now=0)
    gang = job(s, "b", user="bob", gpus=8, workers=2, now=1)
    s.cycle(now=1)
    assert {w.placement[0].node for w in small} == {"n0"} and {a.node for a in gang.placement} == {"n1", "n2"}
    owed = job(s, "a", gpus=8, now=100)
    res = s.cycle(now=1000)
    assert owed.state == ADMITTED
    if small_owner == "b":
        assert owed.placement[0].node == "n0" and {v.id for v, _ in res.preempted} == {w.id for w in small}
        assert gang.state == ADMITTED and gang.preemptions == 0
    else:
        assert [v.id for v, _ in res.preempted] == [gang.id]
        assert all(w.state == ADMITTED for w in small)


def test_preemption_delay_never_delays_reclaim_for_a_guarantee():
    """EngineConfig.preemption_delay holds back only work its team is not owed: owed work
    reclaims borrowed GPUs at once, as without it."""
    s = cluster(nodes=1, gpus=8, preemption_delay=3600)     # a and b guaranteed 4 each
    b1, b2 = job(s, "b", user="bob", gpus=4, now=0), job(s, "b", user="bob", gpus=4, now=0)
    s.cycle(now=0)
    owed = job(s, "a", gpus=4, now=1000)
    res = s.cycle(now=1000)
    assert [v.id for v, _ in res.preempted] in ([b1.id], [b2.id]) and owed.state == ADMITTED


def test_preemption_delay_gives_gpus_time_to_free_up_before_a_swap_for_shorter_work():
    """A swap for shorter work (not owed: the team already uses its guarantee) waits
    ``preemption_delay`` from the short job's submission; GPUs that free up meanwhile spare it."""
    for ends_by_itself in (False, True):
        s = cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}}], preemption_delay=600)
        long = job(s, "a", gpus=4, time_limit=100 * 3600, now=0)
        s.cycle(now=0)
        short = job(s, "a", gpus=4, time_limit=3600, now=5000)
        res = s.cycle(now=5000)
        assert res.preempted == [] and short.state == PENDING and res.wake_at == 5600   # replay looks again then
        e = s.explain(short.id, now=5000)           # what its owner is told while it waits
        assert e["eta"] == 5600 and e["eta_reason"].startswith("once it has waited 600 s (the preemption delay)"), e
        if ends_by_itself:
            s.mark_finished(long.id, now=5300)
            res = s.cycle(now=5300)
            assert res.preempted == [] and short.state == ADMITTED
        else:
            assert s.cycle(now=5599).preempted == [] and short.state == PENDING
            res = s.cycle(now=5600)
            assert [(v.id, by.id) for v, by in res.preempted] == [(long.id, short.id)] and short.state == ADMITTED
