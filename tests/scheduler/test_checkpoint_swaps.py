"""Swaps that wait for a checkpoint: a class declares how its work checkpoints
(``checkpoint_every``, ``startup``), or a workload declares its own ``checkpoint_every``, and
preemption for shorter work then takes a victim only while it would lose at most
``EngineConfig.swap_loss`` seconds of work. Checkpoints that running work reports:
test_reported_checkpoints.py."""

import math

import pytest
from sched_helpers import cluster, job

from scheduler import ValidationError
from scheduler.model import ADMITTED, PENDING, RUNNING
from scheduler.preemption import lost_words, since_checkpoint

HOUR = 3600.0
TRAINING = {"name": "training", "rank": 200, "preempt_after": 600}


def one_team(checkpoints=True, **cfg):
    """One 4-GPU node, all of it guaranteed to team a; training checkpoints every 30 minutes
    after a minute of loading, when ``checkpoints``."""
    s = cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}},
                                         {"name": "b", "guaranteed": {"gpu": 0}}], **cfg)
    if checkpoints:
        s.put_class({**TRAINING, "checkpoint_every": 1800, "startup": 60}, now=0)
    return s


def start(s, queue, limits_h, now):
    """Long jobs of ``queue``, admitted and reported running at ``now``."""
    ws = [job(s, queue, gpus=1, time_limit=h * HOUR, now=now) for h in limits_h]
    s.cycle(now=now)
    for w in ws:
        s.mark_running(w.id, now=now)
    return ws


def test_a_swap_waits_until_its_victim_has_just_saved():
    s = one_team()
    runs = start(s, "a", [100, 100, 100, 100], now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    res = s.cycle(now=700)
    # 640 s of work since the start (after the 60 s of loading) would be lost: no swap yet,
    # and the cycle says when the first checkpoint (1,860 s) makes one possible.
    assert not res.preempted and short.state == PENDING
    assert res.wake_at == 1860
    assert not s.cycle(now=1500).preempted
    res = s.cycle(now=1860 + 120)          # 2 minutes past the checkpoint: 120 s lost ≤ 300
    (victim, by), = res.preempted
    assert by.id == short.id and short.state == ADMITTED and res.lost == {victim.id: 120}
    assert sum(w.state == RUNNING for w in runs) == 3
    # Its owner is told what it lost.
    ev, = s.events(workload_id=victim.id, kinds=("preempted",))
    assert ev.data["lost_s"] == 120 and ev.reason.endswith(
        "; the 2 minutes of work since its last checkpoint are lost"), ev.reason


def test_without_declared_checkpoints_the_swap_happens_at_once():
    s = one_team(checkpoints=False)
    start(s, "a", [100, 100, 100, 100], now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    res = s.cycle(now=700)
    assert [by.id for _, by in res.preempted] == [short.id] and res.wake_at is None
    assert res.lost == {}                    # not known, so not claimed
    ev, = s.events(workload_id=res.preempted[0][0].id, kinds=("preempted",))
    assert "lost_s" not in ev.data and "checkpoint" not in ev.reason


def test_the_victim_is_the_one_that_has_just_saved():
    # The job with the most time left (the usual victim) started later and is mid-interval;
    # the other long one has just passed a checkpoint, so it is the one swapped out.
    s = one_team()
    early = start(s, "a", [60, 60, 60], now=0)
    late = start(s, "a", [100], now=900)[0]
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=1900)
    res = s.cycle(now=1900)                  # early: 40 s past its checkpoint; late: 940 s into its first
    (victim, by), = res.preempted
    assert by.id == short.id and victim.id in {w.id for w in early} and late.state == RUNNING
    assert since_checkpoint(late, s.state.classes["training"], 1900) == 940


def test_swap_loss_sets_how_much_a_swap_may_throw_away():
    s = one_team(swap_loss=math.inf)         # no limit: swaps as if checkpoints were unknown
    start(s, "a", [100] * 4, now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    assert s.cycle(now=700).preempted and short.state == ADMITTED
    s = one_team(swap_loss=900)               # 640 s ≤ 900 s
    start(s, "a", [100] * 4, now=0)
    job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    assert s.cycle(now=700).preempted


def test_reclaim_for_a_guarantee_does_not_wait_for_a_checkpoint():
    # Team b borrows the whole node; team a's owed job reclaims as soon as preempt_after has
    # passed, mid-interval: a guarantee is due, a swap is not.
    s = one_team()
    start(s, "b", [100] * 4, now=0)
    owed = job(s, "a", gpus=1, time_limit=100 * HOUR, now=700)
    res = s.cycle(now=700)
    assert [by.id for _, by in res.preempted] == [owed.id] and owed.state == ADMITTED


def test_work_admitted_but_not_yet_running_loses_nothing():
    s = one_team()
    ws = [job(s, "a", gpus=1, time_limit=100 * HOUR, now=0) for _ in range(4)]
    s.cycle(now=0)                            # admitted, never reported running
    cls = s.state.classes["training"]
    assert since_checkpoint(ws[0], cls, 5000) == 0.0
    s.mark_running(ws[0].id, now=100)
    assert since_checkpoint(ws[0], cls, 130) == 0.0               # still loading
    assert since_checkpoint(ws[0], cls, 100 + 60 + 1800 + 5) == 5
    assert since_checkpoint(ws[0], s.state.classes["preemptible"], 5000) is None


@pytest.mark.parametrize("field, bad, words", [
    ("checkpoint_every", 0, "between 1"), ("checkpoint_every", "30m", "a number"),
    ("startup", -5, "between 0"), ("startup", None, "a number")])
def test_checkpoint_fields_are_checked(field, bad, words):
    s = one_team(checkpoints=False)
    with pytest.raises(ValidationError, match=f"{field} must be"):
        s.put_class({**TRAINING, field: bad}, now=0)
    assert s.state.classes["training"].checkpoint_every is None       # nothing changed
    with pytest.raises(ValidationError, match=words):
        s.put_class({**TRAINING, field: bad}, now=0)


def test_the_eta_of_work_waiting_for_a_swap_is_its_victims_checkpoint():
    s = one_team()
    start(s, "a", [100] * 4, now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    s.cycle(now=700)
    e = s.explain(short.id, now=700)
    assert e["eta"] == 1860 and e["eta_seconds"] == 1160
    assert e["eta_reason"].startswith("when a workload w0000004, which declares much more time left, "
                                      "has saved its next checkpoint and gives way"), e


@pytest.mark.parametrize("checkpoints", [True, False])
def test_reclaim_takes_the_borrower_that_loses_the_least(checkpoints):
    # Team b borrows the whole node: three jobs since 0, one since 1,000. At 1,950 team a's
    # owed job reclaims one GPU. Without declared checkpoints the youngest goes (it has run
    # the least); with them, one of the older ones, which saved 90 s ago, where the youngest
    # would lose 890 s.
    s = one_team(checkpoints=checkpoints)
    old = start(s, "b", [100] * 3, now=0)
    young = start(s, "b", [100], now=1000)[0]
    owed = job(s, "a", gpus=1, time_limit=100 * HOUR, now=1950)
    (victim, by), = s.cycle(now=1950).preempted
    assert by.id == owed.id
    assert (victim.id in {w.id for w in old}) if checkpoints else victim.id == young.id


def test_a_workload_declares_its_own_checkpoints():
    # The class declares none; one of the long jobs says it saves every 30 minutes (the others
    # are never swapped: they declare less time left). It is swapped only after its checkpoint.
    s = one_team(checkpoints=False)
    s.put_class({**TRAINING, "startup": 60}, now=0)
    runs = [job(s, "a", gpus=1, time_limit=h * HOUR, now=0, **({"checkpoint_every": 1800} if h == 100 else {}))
            for h in (100, 5, 5, 5)]
    s.cycle(now=0)
    for w in runs:
        s.mark_running(w.id, now=0)
    assert runs[0].checkpoint_every == 1800 and runs[1].checkpoint_every is None
    short = job(s, "a", gpus=1, time_limit=HOUR, now=700)
    res = s.cycle(now=700)
    assert not res.preempted and res.wake_at == 1860
    (victim, by), = s.cycle(now=1900).preempted
    assert (victim.id, by.id) == (runs[0].id, short.id)


@pytest.mark.parametrize("bad, words", [(0, "between 1"), ("30m", "a number"), (True, "a number")])
def test_a_workloads_checkpoint_interval_is_checked(bad, words):
    s = one_team()
    with pytest.raises(ValidationError, match=f"checkpoint_every \\(seconds\\) must be.*{words}|{words}"):
        job(s, "a", gpus=1, time_limit=HOUR, now=0, checkpoint_every=bad)
    assert not s.state.pending                                           # nothing accepted


@pytest.mark.parametrize("lost, words", [
    (None, ""), (20, "; it had saved a checkpoint less than a minute before"),
    (70, "; the minute of work since its last checkpoint is lost"),
    (1500, "; the 25 minutes of work since its last checkpoint are lost")])
def test_what_was_lost_is_said_in_words(lost, words):
    assert lost_words(lost) == words
