"""preemption.candidates merges per-queue lists lazily and stops at ``limit``; it must give
exactly what gathering every candidate and sorting by the documented keys gives.

The reference below is the rule of the module docstring written the slow way: every
candidate gets its sort key, (0, rank, work lost, -start, -seq) for lower-ranked work and
borrowers of lower rank, (1, ...) for other borrowers (only when the preemptor fits in its
guarantee), (2, -time left, work lost, -start, -seq) for longer work of its own queue and class.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import cluster, job

from scheduler import ValidationError, preemption
from scheduler.model import PENDING
from scheduler.policies import declared_left

HOUR = 3600.0
KINDS = ["training", "training", "batch", "notebook"]


def reference(state, index, w, cls, longer, assumed, swap_borrowed, limit):
    tree = state.tree
    within = tree.within_guarantee(w.queue, w.total) is None
    keyed = []
    for q in index.by_queue:
        lst = list(index.live(q))
        if q == w.queue:
            keyed += [((0,) + k, v) for k, v in lst if k[0] < cls.rank]
            if longer is not None:
                for k, v in lst:
                    left = declared_left(v, index.now, assumed)
                    g, u = tree.guaranteed[q], tree.usage[q]
                    stays = swap_borrowed or all(u.get(r, 0) - v.total.get(r, 0) + n <= g.get(r, 0)
                                                 for r, n in w.total.items() if r in tree.governed[q])
                    if k[0] == cls.rank and left > longer and stays and preemption._ran_swap_after(state, v, index.now):
                        keyed.append(((2, -left) + k[1:], v))
            continue
        if (not within and not cls.may_borrow) or not lst or not tree.borrowing(q, lst[0][1].total, tree.chain[w.queue]):
            continue
        keyed += [((0 if k[0] < cls.rank else 1,) + k, v) for k, v in lst if within or k[0] < cls.rank]
    keyed.sort(key=lambda t: t[0])
    return [v.id for _, v in keyed][:limit]


def submit(s, *args, **kw):
    try:
        job(s, *args, **kw)
    except ValidationError:
        pass        # a notebook beyond its team's guarantee: refused, as it should be


@st.composite
def busy_clusters(draw):
    teams = draw(st.integers(2, 4))
    guarantees = [draw(st.integers(0, 8)) for _ in range(teams)]
    s = cluster(nodes=4, gpus=8, queues=[{"name": f"t{i}", "guaranteed": {"gpu": g}} for i, g in enumerate(guarantees)])
    for step in range(draw(st.integers(1, 4))):
        now = step * 1000
        for _ in range(draw(st.integers(1, 12))):
            submit(s, f"t{draw(st.integers(0, teams - 1))}", gpus=draw(st.sampled_from([1, 1, 2, 4, 8])),
                kind=draw(st.sampled_from(KINDS)), now=now,
                time_limit=draw(st.sampled_from([None, 1 * HOUR, 10 * HOUR, 100 * HOUR])))
        s.cycle(now=now)
    return s, draw(st.data())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters())
def test_lazy_candidates_match_the_sorted_reference(world):
    s, data = world
    now = 10_000.0
    index = preemption.VictimIndex(s.state, now)
    running = [v for lst in index.by_queue.values() for _, v in lst]
    # Some work stopped earlier in the cycle: it must never be offered again.
    index.drop(data.draw(st.lists(st.sampled_from(running), unique_by=lambda v: v.id) if running else st.just([])))
    pending = [w for w in s.state.pending.values() if w.state == PENDING]
    for _ in range(3):
        w = data.draw(st.sampled_from(pending)) if pending else \
            job(s, "t0", gpus=data.draw(st.sampled_from([1, 4])), time_limit=HOUR, now=now)
        cls = s.state.classes[w.priority]
        longer = data.draw(st.sampled_from([None, 0.0, 8 * HOUR]))
        swap_borrowed = data.draw(st.booleans())
        limit = data.draw(st.sampled_from([None, 1, 3, 256]))
        got = preemption.candidates(s.state, index, w, cls, longer, 86400.0, swap_borrowed, limit)
        assert [v.id for v in got] == reference(s.state, index, w, cls, longer, 86400.0, swap_borrowed, limit)
        assert not {v.id for v in got} & index.gone


def test_stopped_work_is_skipped_everywhere_the_index_is_read():
    s = cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}}, {"name": "b", "guaranteed": {"gpu": 0}}])
    runs = [job(s, "b", gpus=1, kind="batch", now=0) for _ in range(4)]
    s.cycle(now=0)
    index = preemption.VictimIndex(s.state, 1000.0)
    assert index.eligible() == {w.id for w in runs}
    index.drop(runs[:2])
    assert index.eligible() == {w.id for w in runs[2:]}
    assert [v.id for _, v in index.live("b")] == [w.id for w in reversed(runs[2:])]    # youngest first
    owed = job(s, "a", gpus=1, now=1000)
    got = preemption.candidates(s.state, index, owed, s.state.classes[owed.priority])
    assert [v.id for v in got] == [w.id for w in reversed(runs[2:])]
