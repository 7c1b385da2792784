"""Preemption for shorter work inside a queue (EngineConfig.preempt_for_shorter, default 8)."""

import pytest
from sched_helpers import cluster, job
from traitlets import TraitError

from scheduler import EngineConfig, ValidationError
from scheduler.model import ADMITTED, PENDING
from scheduler.policies import RAN

HOUR = 3600.0


def two_teams(**cfg):
    """One 4-GPU node; team a is guaranteed all of it, team b nothing (it may only borrow)."""
    return cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}},
                                             {"name": "b", "guaranteed": {"gpu": 0}}], **cfg)


def test_short_work_preempts_the_teammate_with_the_most_time_left():
    s = two_teams()
    long_ = [job(s, "a", gpus=1, time_limit=t * HOUR, now=0) for t in (48, 100, 60, 30)]
    s.cycle(now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    res = s.cycle(now=700)
    # 2 h × 8 = 16 h: all four have more left; the one with the most (100 h) goes.
    assert [(v.id, by.id) for v, by in res.preempted] == [(long_[1].id, short.id)]
    assert short.state == ADMITTED and long_[1].state == PENDING
    assert long_[1].metadata[RAN] == 700               # it resumes with what it ran
    ev = s.events(workload_id=long_[1].id, kinds=("preempted",))
    assert ev and ev[0].data["preemptor"] == short.id and "much less time left" in ev[0].reason
    # The team's usage did not move: still its whole guarantee, nobody else touched.
    assert s.state.tree.usage["a"]["gpu"] == 4


def test_a_class_swap_after_lets_swapped_work_reach_its_checkpoint():
    # The class's swap_after (30 min) protects running work from swaps for longer than its
    # preempt_after (10 min); reclaim by another team is still bound by preempt_after only.
    s = two_teams()
    s.put_class({"name": "training", "rank": 200, "preempt_after": 600, "swap_after": 1800}, now=0)
    runs = [job(s, "a", gpus=1, time_limit=100 * HOUR, now=0) for _ in range(4)]
    s.cycle(now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=700)
    assert not s.cycle(now=700).preempted and short.state == PENDING     # ran 700 s < 1,800 s
    res = s.cycle(now=1800)
    assert [by.id for _, by in res.preempted] == [short.id] and short.state == ADMITTED
    assert sum(w.state == ADMITTED for w in runs) == 3


@pytest.mark.parametrize("bad, words", [(300, "below preempt_after"), (-1, "between 0"), ("1h", "a number")])
def test_swap_after_is_checked(bad, words):
    s = two_teams()
    with pytest.raises(ValidationError, match=words):
        s.put_class({"name": "training", "rank": 200, "preempt_after": 600, "swap_after": bad}, now=0)
    assert s.state.classes["training"].swap_after is None          # nothing changed


def test_work_not_shorter_by_the_factor_waits():
    s = two_teams()
    for _ in range(4):
        job(s, "a", gpus=1, time_limit=48 * HOUR, now=0)
    s.cycle(now=0)
    mid = job(s, "a", gpus=1, time_limit=10 * HOUR, now=700)     # 80 h > 48 h left: not 8× shorter
    res = s.cycle(now=700)
    assert not res.preempted and mid.state == PENDING


def test_time_already_run_counts_and_a_fresh_start_is_protected_by_preempt_after():
    s = two_teams()
    runs = [job(s, "a", gpus=1, time_limit=20 * HOUR, now=0) for _ in range(4)]
    s.cycle(now=0)
    short = job(s, "a", gpus=1, time_limit=2 * HOUR, now=100)
    assert not s.cycle(now=100).preempted          # 20 h left > 16 h, but training's 600 s not yet run
    res = s.cycle(now=700)
    assert [by.id for _, by in res.preempted] == [short.id] and short.state == ADMITTED
    # At 6 h the others have 14 h left: a 2-hour job (it needs more than 16 h left) is not 8× shorter.
    later = job(s, "a", gpus=1, time_limit=2 * HOUR, now=6 * HOUR)
    res = s.cycle(now=6 * HOUR)
    assert not res.preempted and later.state == PENDING
    assert sum(w.state == ADMITTED for w in runs) == 3


def test_never_across_teams_nor_above_its_rank_nor_non_preemptible_work():
    s = two_teams()
    for _ in range(4):
        job(s, "a", gpus=1, time_limit=100 * HOUR, now=0)
    s.cycle(now=0)
    other = job(s, "b", user="bob", gpus=1, time_limit=60, now=700)   # another team: may not swap
    batch = job(s, "a", gpus=1, kind="batch", time_limit=60, now=700)  # lower rank: may not preempt
    res = s.cycle(now=10_000)
    assert not res.preempted and other.state == PENDING and batch.state == PENDING

    nb = two_teams()
    for _ in range(4):
        job(nb, "a", gpus=1, kind="notebook", time_limit=100 * HOUR, now=0)
    nb.cycle(now=0)
    quick = job(nb, "a", gpus=1, kind="notebook", time_limit=60, now=1)
    assert not nb.cycle(now=10_000).preempted and quick.state == PENDING


def borrowing_team(owner_waits: bool):
    """Team a (guaranteed 2) runs four long jobs on one node, borrowing 2; team c (guaranteed 2)
    has just started four on the other, borrowing 2 too. Team b (guaranteed 4) may ask for a
    whole node: it is owed, but no node can be cleared by reclaim yet (a may lose only 2, c's
    jobs are younger than preempt_after). Then a submits a short job."""
    s = cluster(nodes=2, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 2}},
                                          {"name": "b", "guaranteed": {"gpu": 4}},
                                          {"name": "c", "guaranteed": {"gpu": 2}}])
    for _ in range(4):
        job(s, "a", gpus=1, time_limit=100 * HOUR, now=0)
    s.cycle(now=0)
    for _ in range(4):
        job(s, "c", user="cy", gpus=1, time_limit=100 * HOUR, now=650)
    s.cycle(now=650)
    owner = job(s, "b", user="bob", gpus=4, now=700) if owner_waits else None
    short = job(s, "a", gpus=1, time_limit=60, now=700)
    return s, owner, short


def test_a_team_above_its_guarantee_swaps_only_while_no_owner_waits():
    s, _, short = borrowing_team(owner_waits=False)
    res = s.cycle(now=700)
    assert [by.id for _, by in res.preempted] == [short.id] and short.state == ADMITTED
    # With an owner waiting, a swap would trade a's borrowed work, reclaimable now, for fresh
    # work that may not be preempted for preempt_after: the owner could wait longer.
    s, owner, short = borrowing_team(owner_waits=True)
    res = s.cycle(now=700)
    assert not res.preempted and owner.state == PENDING and short.state == PENDING
    assert res.blockers[owner.id].code == "capacity"


def test_no_churn_the_victim_does_not_take_its_place_back():
    s = two_teams()
    long_ = [job(s, "a", gpus=1, time_limit=50 * HOUR, now=0) for _ in range(4)]
    s.cycle(now=0)
    short = job(s, "a", gpus=1, time_limit=HOUR, now=700)
    s.cycle(now=700)
    victim = next(w for w in long_ if w.state == PENDING)
    for t in (2000, 3000, 3300):
        assert not s.cycle(now=t).preempted
    assert short.state == ADMITTED and victim.state == PENDING


def test_off_and_invalid_factors():
    s = two_teams(preempt_for_shorter=0)
    for _ in range(4):
        job(s, "a", gpus=1, time_limit=100 * HOUR, now=0)
    s.cycle(now=0)
    short = job(s, "a", gpus=1, time_limit=60, now=700)
    assert not s.cycle(now=700).preempted and short.state == PENDING
    for bad in (-1, 0.5, 1):
        with pytest.raises(TraitError, match="preempt_for_shorter"):
            EngineConfig(preempt_for_shorter=bad)
    assert EngineConfig().preempt_for_shorter == 8.0
