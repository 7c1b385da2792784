"""Checkpoints that running work reports (``Scheduler.report_checkpoint``): what a preemption
would lose is then known exactly, instead of inferred from a declared cadence, so swaps go
ahead as soon as a victim has saved and reclaim takes the borrower that just saved."""

from dataclasses import replace

import pytest
from sched_helpers import job
from test_checkpoint_swaps import HOUR, TRAINING, one_team, start

from scheduler import Conflict, Scheduler
from scheduler.model import PENDING, PREEMPTING, RUNNING
from scheduler.preemption import _checkpoint_every, since_checkpoint
from scheduler.store import open_store


def test_a_reported_checkpoint_lets_a_waiting_swap_go_ahead():
    # The class saves every 30 minutes after a minute of loading, so at 700 s a victim would
    # lose 640 s by the cadence and the swap waits for 1,860 s. One job reports that it saved
    # at 650 s: it loses 50 s, and it is the one swapped out at once.
    s = one_team()
    runs = start(s, "a", [100, 100, 100, 100], now=0)
    s.report_checkpoint(runs[2].id, at=650, now=660)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    res = s.cycle(now=700)
    (victim, by), = res.preempted
    assert (victim.id, by.id) == (runs[2].id, short.id) and res.lost == {runs[2].id: 50}
    ev, = s.events(workload_id=victim.id, kinds=("preempted",))
    assert ev.data["lost_s"] == 50


def test_work_that_reports_but_declares_no_cadence_waits_for_its_next_report():
    # Nothing is declared; each job has reported one checkpoint, 20 minutes after its start,
    # so what it would lose is known, and its next save is expected 20 minutes after that.
    s = one_team(checkpoints=False)
    runs = start(s, "a", [100] * 4, now=0)
    for w in runs:
        s.report_checkpoint(w.id, at=1200, now=1200)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=1800)
    res = s.cycle(now=1800)
    # 600 s since each one's save: more than swap_loss (300 s). The swap waits for the next
    # save, expected at 2,400 s; the ETA says so.
    assert not res.preempted and short.state == PENDING and res.wake_at == 2400
    ex = s.explain(short.id, now=1800)
    assert ex["eta"] == 2400 and "has saved its next checkpoint" in ex["eta_reason"], ex
    # A save reported sooner than expected lets the swap go at once.
    s.report_checkpoint(runs[1].id, now=2000)
    (victim, by), = s.cycle(now=2050).preempted
    assert (victim.id, by.id) == (runs[1].id, short.id)
    assert since_checkpoint(runs[0], s.state.classes["training"], 2050) == 850
    # A first save right after the start (the initial weights) says nothing of the cadence.
    training = s.state.classes["training"]
    assert _checkpoint_every(runs[2], training) == 1200
    assert _checkpoint_every(replace(runs[2], checkpointed_at=30.0), training) is None


def test_two_reports_show_how_often_work_saves_and_when_its_next_save_is_due():
    # Nothing declared. Every job reports saves at 100 s and 1,300 s (every 20 minutes);
    # at 1,700 s each would lose 400 s: the swap waits, and now the cycle knows until when.
    s = one_team(checkpoints=False)
    runs = start(s, "a", [100] * 4, now=0)
    for w in runs:
        s.report_checkpoint(w.id, at=100, now=100)
        s.report_checkpoint(w.id, at=1300, now=1300)
    assert runs[0].checkpoint_seen_every == 1200
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=1700)
    res = s.cycle(now=1700)
    assert not res.preempted and res.wake_at == 2500
    ex = s.explain(short.id, now=1700)
    assert ex["eta"] == 2500 and "has saved its next checkpoint" in ex["eta_reason"], ex
    # The seen interval beats a declared one (the class says 30 minutes).
    s.put_class({**TRAINING, "checkpoint_every": 1800, "startup": 60}, now=1700)
    assert s.cycle(now=1710).wake_at == 2500
    # The first report of a run shows no interval yet.
    s.mark_finished(runs[0].id, now=1720)
    s.cycle(now=1730)
    s.mark_running(short.id, now=1730)
    s.report_checkpoint(short.id, at=1800, now=1800)
    assert short.checkpoint_seen_every is None
    s.report_checkpoint(short.id, at=2400, now=2400)
    assert short.checkpoint_seen_every == 600


def test_reclaim_takes_the_borrower_that_reported_saving_last():
    # Team b borrows the whole node, all four since 0, no cadence declared: without reports
    # they would all lose 1,950 s and the youngest by sequence would go. One reported 30 s
    # ago: it loses the least.
    s = one_team(checkpoints=False)
    lent = start(s, "b", [100] * 4, now=0)
    s.report_checkpoint(lent[0].id, at=1920, now=1925)
    owed = job(s, "a", gpus=1, time_limit=100 * HOUR, now=1950)
    (victim, by), = s.cycle(now=1950).preempted
    assert (victim.id, by.id) == (lent[0].id, owed.id)


def test_a_report_from_an_earlier_run_does_not_count():
    # A job saved at 600 s, was reclaimed at 1,000 s and restarted at 2,000 s: its next
    # preemption loses the work of this run, by the class's cadence, not since 600 s.
    s = one_team()
    lent = start(s, "b", [100] * 4, now=0)
    s.report_checkpoint(lent[0].id, at=600, now=600)
    owed = job(s, "a", gpus=1, time_limit=HOUR, now=1000)
    (victim, _), = s.cycle(now=1000).preempted
    assert victim.id == lent[0].id
    s.mark_finished(owed.id, now=1500)
    s.cycle(now=2000)
    s.mark_running(victim.id, now=2000)
    training = s.state.classes["training"]
    assert since_checkpoint(victim, training, 2500) == 440          # 500 s run − 60 s loading
    with pytest.raises(Conflict, match="older than the current run"):
        s.report_checkpoint(victim.id, at=1900, now=2500)
    assert victim.checkpointed_at == 600
    # Its first report of this run pairs with none of the earlier run's.
    s.report_checkpoint(victim.id, at=2400, now=2500)
    assert victim.checkpointed_at == 2400 and victim.checkpoint_seen_every is None


def test_what_a_report_may_say():
    s = one_team(checkpoints=False)
    w = start(s, "a", [100], now=0)[0]
    s.report_checkpoint(w.id, at=500, now=600)
    s.report_checkpoint(w.id, at=400, now=610)                  # older than the latest: kept out
    assert w.checkpointed_at == 500
    s.report_checkpoint(w.id, at=900, now=700)                  # a clock ahead of ours: now
    assert w.checkpointed_at == 700
    pending = job(s, "a", gpus=4, now=700)
    with pytest.raises(Conflict, match="pending; only running work reports checkpoints"):
        s.report_checkpoint(pending.id, now=710)
    s.mark_finished(w.id, now=800)
    with pytest.raises(Conflict, match="finished"):
        s.report_checkpoint(w.id, now=810)


def test_a_reported_checkpoint_is_durable(tmp_path):
    url = f"sqlite:///{tmp_path / 'ch.db'}"
    s = Scheduler(store=open_store(url))
    s.put_node({"name": "n0", "gpus": 4, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 4}}, now=0)
    s.put_class({**TRAINING, "startup": 60}, now=0)
    w = job(s, "a", gpus=1, now=0)
    s.cycle(now=0)
    s.mark_running(w.id, now=10)
    s.report_checkpoint(w.id, at=400, now=420)
    again = Scheduler(store=open_store(url)).get(w.id)
    assert again.state == RUNNING and again.checkpointed_at == 400



def test_work_seen_saving_when_stopped_loses_only_its_restart():
    # The class saves every 30 minutes; victims keep their GPUs until they have stopped.
    s = one_team(release=False)
    runs = start(s, "a", [100] * 4, now=0)
    first = job(s, "a", gpus=1, time_limit=2 * HOUR, now=1900)
    (victim, _), = s.cycle(now=1900).preempted            # 40 s past its checkpoint
    assert victim.state == PREEMPTING
    running = next(w for w in runs if w.state == RUNNING)
    with pytest.raises(Conflict, match="while it is being preempted"):
        s.report_checkpoint(running.id, now=1901, on_stop=True)
    assert not running.saves_on_stop
    # In its grace period it saves, and its launcher says it was on stop.
    s.report_checkpoint(victim.id, at=1905, now=1906, on_stop=True)
    assert victim.saves_on_stop and victim.checkpointed_at == 1905
    s.mark_stopped(victim.id, now=1910)
    s.cycle(now=1910)
    s.mark_running(first.id, now=1910)
    s.mark_finished(first.id, now=2000)
    s.cycle(now=2000)
    s.mark_running(victim.id, now=2000)
    # Mid-interval for everyone (the others would lose 740 s): the job that saves on stop is
    # swapped out at once, and its owner is told only its restart is lost.
    second = job(s, "a", gpus=1, time_limit=2 * HOUR, now=2800)
    res = s.cycle(now=2800)
    (v, by), = res.preempted
    assert (v.id, by.id) == (victim.id, second.id) and res.lost == {victim.id: 0.0}
    ev = s.events(workload_id=victim.id, kinds=("preempted",))[-1]
    assert ev.data["lost_s"] == 0 and ev.reason.endswith("it saves a checkpoint when stopped, so only its "
                                                          "restart is lost"), ev.reason


def test_a_class_may_declare_that_its_work_saves_when_stopped():
    # An admin whose training images save on SIGTERM says so once, for the class: its work
    # is swapped out at once (no wait for the next periodic save), and its owners are told
    # only the restart is lost. Without the declaration the same swap waits for a save.
    for declared in (False, True):
        s = one_team()
        s.put_class({**TRAINING, "checkpoint_every": 1800, "startup": 60, "saves_on_stop": declared}, now=0)
        runs = start(s, "a", [100] * 4, now=0)
        short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
        res = s.cycle(now=700)
        if not declared:
            assert res.preempted == [] and s.get(short.id).state == PENDING
            continue
        (victim, by), = res.preempted
        assert by.id == short.id and victim.id in {w.id for w in runs} and res.lost == {victim.id: 0.0}
        assert not victim.saves_on_stop                  # declared by its class, not seen
        ev, = s.events(workload_id=victim.id, kinds=("preempted",))
        assert ev.reason.endswith("so only its restart is lost"), ev.reason
        assert since_checkpoint(runs[0], s.state.classes["training"], 900) == 0.0
