"""Explanations (position, ETA, reason), idle reclamation, the ledger and the event log."""

import pytest
from sched_helpers import cluster, job

from scheduler import Conflict
from scheduler.model import RECLAIMED, RECLAIMING


def test_pending_work_explains_position_eta_and_reason():
    s = cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 2}},
                                          {"name": "b", "guaranteed": {"gpu": 2}}],
                expansion_order=False, half_life=7 * 86400.0, fair_share_band=0.1)   # fair share, then age
    r1 = job(s, "a", gpus=4, time_limit=3600, now=0)
    s.cycle(now=0)
    w1 = job(s, "a", gpus=2, time_limit=600, now=10)
    w2 = job(s, "b", user="bob", gpus=4, time_limit=600, now=11)
    w3 = job(s, "a", gpus=2, time_limit=600, now=12)
    s.cycle(now=20)
    e3 = s.explain(w3.id, now=20)
    assert e3["position_in_queue"] == 2 and e3["queue_length"] == 2 and e3["pending"] == 3
    assert "needs 2 × any GPU" in e3["reason"] and "4/4 GPUs" in e3["reason"]
    # Fair share puts b's w2 first (a has been using the node); r1 ends at 3600, w2
    # runs to 4200, then w1 and w3 fit side by side.
    e2 = s.explain(w2.id, now=20)
    assert e2["position"] == 1 and e2["eta"] == 3600 and e2["eta_seconds"] == 3580
    assert "declared time limit" in e2["eta_reason"]
    assert s.explain(w1.id, now=20)["eta"] == 4200
    assert e3["position"] == 3 and s.explain(w3.id, now=20)["eta"] == 4200
    assert s.explain(r1.id, now=20)["state"] == "admitted"


def test_eta_is_unknown_when_running_work_declares_no_limit():
    s = cluster(nodes=1, gpus=2)
    job(s, "a", gpus=2, now=0)             # no time limit
    s.cycle(now=0)
    w = job(s, "a", gpus=2, now=1)
    s.cycle(now=1)
    e = s.explain(w.id, now=1)
    assert e["eta"] is None and "declare no run-time limit" in e["eta_reason"]


def test_idle_notebook_is_warned_then_released_with_gpu_hours_recorded():
    s = cluster(nodes=1, gpus=2, queues=[
        {"name": "a", "guaranteed": {"gpu": 2}, "idle": {"warn_after": 1800, "release_after": 3600}}])
    nb = job(s, "a", gpus=2, kind="notebook", now=0)
    s.cycle(now=0)
    s.mark_running(nb.id, now=5)
    assert s.report_idle(nb.id, idle_since=100, now=1000).action == "none"
    d = s.report_idle(nb.id, idle_since=100, now=2000)
    assert d.action == "warn" and d.release_at == 3700
    assert s.report_idle(nb.id, idle_since=100, now=2100).action == "none"   # warned once
    d = s.report_idle(nb.id, idle_since=100, now=3700)
    assert d.action == "release" and d.gpus == 2 and d.gpu_hours_returned == pytest.approx(2 * 3600 / 3600)
    # Its GPUs return once its server has stopped (the notebook watch has the hub stop it, and
    # the spawner reports the end): a kernel may still hold GPU memory until then.
    assert s.get(nb.id).state == RECLAIMING and s.state.inventory.free["gpu"] == 0
    with pytest.raises(Conflict):
        s.report_idle(nb.id, idle_since=100, now=3710)
    s.mark_finished(nb.id, now=3720, reason="server stopped")
    assert s.get(nb.id).state == RECLAIMED and s.state.inventory.free["gpu"] == 2
    assert s.get(nb.id).reason == "idle for 60 min (queue limit 60 min); it ended (server stopped)"
    kinds = [e.kind for e in s.events(workload_id=nb.id)]
    assert kinds == ["submitted", "admitted", "started", "idle_warning", "reclaiming", "gpu_returned", "reclaimed"]
    returned = s.events(workload_id=nb.id, kinds=("gpu_returned",))[0]
    assert returned.data["gpu_hours_returned"] == pytest.approx(2.0)
    with pytest.raises(Conflict):
        s.report_idle(nb.id, idle_since=100, now=4000)


def test_ledger_counts_gpu_seconds_by_user_queue_flavor_with_window_and_prices():
    s = cluster(nodes=1, gpus=8, model="a100")
    s.prices = {"a100": 3.0}
    w1 = job(s, "a", user="ada", gpus=2, gpu_model="a100", now=0)
    w2 = job(s, "b", user="bob", gpus=4, now=0)
    s.cycle(now=0)
    s.mark_finished(w1.id, now=3600)
    s.mark_finished(w2.id, now=1800)
    by_user = {r["user"]: r for r in s.usage(0, 7200, by="user")}
    assert by_user["ada"]["gpu_seconds"] == 7200 and by_user["bob"]["gpu_seconds"] == 7200
    # bob asked for any GPU and got A100s: booked, and priced, as what he used.
    assert by_user["ada"]["cost"] == pytest.approx(6.0) and by_user["bob"]["cost"] == pytest.approx(6.0)
    half = {r["queue"]: r["gpu_hours"] for r in s.usage(1800, 3600, by="queue")}
    assert half == {"a": pytest.approx(1.0)}
    flav = {r["flavor"]: r["gpu_seconds"] for r in s.usage(0, 7200, by="flavor")}
    assert flav == {"a100": 14400}
    # By workload, each row says whose it is and where it ran.
    by_w = {r["workload"]: (r["user"], r["queue"], r["gpu_seconds"]) for r in s.usage(0, 7200, by="workload")}
    assert by_w == {w1.id: ("ada", "a", 7200), w2.id: ("bob", "b", 7200)}
    plain = cluster(nodes=1, gpus=8)                 # nodes of no stated model: "any"
    w3 = job(plain, "a", gpus=2, now=0)
    plain.cycle(now=0)
    plain.mark_finished(w3.id, now=3600)
    assert {r["flavor"]: r["gpu_seconds"] for r in plain.usage(0, 7200, by="flavor")} == {"any": 7200}


def test_every_transition_is_an_event_with_time_and_reason():
    s = cluster(nodes=1, gpus=2)
    w = job(s, "a", gpus=1, now=0)
    c = job(s, "a", gpus=8 // 8, now=1)
    s.cancel(c.id, now=2, reason="changed my mind")
    s.cycle(now=3)
    s.mark_running(w.id, now=4)
    s.mark_finished(w.id, now=10, exit_code=3, reason="boom")
    evs = s.events(workload_id=w.id)
    assert [(e.time, e.kind) for e in evs] == [(0, "submitted"), (3, "admitted"), (4, "started"), (10, "failed")]
    assert evs[1].data["placement"] == [{"node": "n0", "gpus": [0]}]
    assert evs[-1].reason == "boom" and s.get(w.id).exit_code == 3
    cancel = s.events(workload_id=c.id, kinds=("cancelled",))[0]
    assert cancel.reason == "changed my mind"
    assert [e.kind for e in s.events(since=3, until=5)] == ["admitted", "started"]


def test_work_above_the_approval_threshold_waits_for_an_admin():
    s = cluster(nodes=2, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 16}, "approval_above": {"gpu": 4}},
                                          {"name": "b"}])
    small = job(s, "a", gpus=4)
    big = job(s, "a", gpus=8)
    other = job(s, "a", gpus=6)
    assert big.state == "awaiting_approval" and "approval above 4" in big.reason
    assert [w.id for w in s.approvals()] == [big.id, other.id]
    res = s.cycle(now=1)
    assert [w.id for w in res.admitted] == [small.id]          # held work does not run
    s.decide(big.id, True, now=2, actor="boss")
    s.decide(other.id, False, now=2, actor="boss", reason="too big for a test")
    assert s.approvals() == [] and s.get(other.id).state == "rejected"
    assert [w.id for w in s.cycle(now=3).admitted] == [big.id]
    assert [(e.kind, e.data.get("actor")) for e in s.events(workload_id=big.id)][1:3] == \
        [("approval_requested", None), ("approved", "boss")]
    with pytest.raises(Conflict):
        s.decide(big.id, True, now=4)


def test_work_larger_than_its_queues_guarantee_is_told_it_runs_only_on_borrowed_gpus():
    # 2 nodes × 4 GPUs; queue a is guaranteed 2, b 6. b's 6-GPU job holds 3 GPUs of each
    # node, so a's 4-GPU job cannot start: it needs more than a is guaranteed, while a's
    # 2-GPU job (within the guarantee) gets the plain capacity reason.
    s = cluster(nodes=2, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 2}},
                                          {"name": "b", "guaranteed": {"gpu": 6}}])
    job(s, "b", user="bob", gpus=3, workers=2, time_limit=3600, now=0)
    s.cycle(now=0)
    big = job(s, "a", gpus=4, time_limit=600, now=1)
    small = job(s, "a", gpus=2, time_limit=600, now=2)
    s.cycle(now=3)
    reason = s.explain(big.id, now=3)["reason"]
    assert reason.startswith("needs 4 × any GPU; no node has that free now"), reason
    assert "it needs 4 GPUs and queue a is guaranteed 2, so it runs only on GPUs other queues leave free " \
        "(none are held for it until it has waited 70 min)" in reason
    assert reason.endswith("and they may take them back"), reason          # training is preemptible
    plain = s.explain(small.id, now=3)["reason"]
    assert "needs 2 × any GPU" in plain and "guaranteed" not in plain, plain


def test_eta_of_work_that_would_borrow_is_marked_as_a_lower_bound():
    # b's 2 × 4 gang holds both nodes until 3600. a is guaranteed 4: its 4-GPU job starts
    # then within the guarantee (a plain estimate); its 8-GPU gang starts when that ends,
    # on 4 GPUs beyond a's guarantee, so whatever b is owed and submits before then goes
    # first: the ETA is only a lower bound, and says so.
    s = cluster(nodes=2, gpus=4, preemption=False, queues=[{"name": "a", "guaranteed": {"gpu": 4}},
                                                           {"name": "b", "guaranteed": {"gpu": 4}}])
    job(s, "b", user="bob", gpus=4, workers=2, time_limit=3600, now=0)
    s.cycle(now=0)
    within = job(s, "a", gpus=4, time_limit=600, now=1)
    big = job(s, "a", gpus=4, workers=2, time_limit=600, now=2)
    s.cycle(now=3)
    e = s.explain(within.id, now=3)
    assert e["eta"] == 3600 and e["eta_earliest"] is False and "earliest" not in e["eta_reason"]
    e = s.explain(big.id, now=3)
    assert e["eta"] == 4200 and e["eta_earliest"] is True
    assert e["eta_reason"].endswith("at the earliest: it would start on GPUs beyond queue a's guarantee, "
                                    "so work other queues are owed and submit before then goes first"), e


def test_a_queue_without_guarantee_is_named_so_and_no_reclaim_is_promised_without_preemption():
    s = cluster(nodes=1, gpus=4, preemption=False,
                queues=[{"name": "a"}, {"name": "b", "guaranteed": {"gpu": 4}}])
    job(s, "b", user="bob", gpus=3, time_limit=3600, now=0)
    s.cycle(now=0)
    w = job(s, "a", gpus=2, time_limit=600, now=1)
    s.cycle(now=2)
    reason = s.explain(w.id, now=2)["reason"]
    assert reason.endswith("it needs 2 GPUs and queue a has no guaranteed GPUs, so it runs only on GPUs "
                           "other queues leave free (none are held for it until it has waited 70 min), "
                           "after the work they are owed"), reason
