"""consolidation.plan scores nodes lazily, in order of a lower bound on the GPUs a plan
there moves, and tries a plan once no node left could beat it. It must choose exactly what
scoring every node first and trying the plans in score order (ties in node order) chooses.

The reference below is that rule written the slow way, from the module's own steps (the
same surroundings: which holders, spare and lenders; only the node order differs). Two
identical clusters are built from one drawn recipe, since a successful plan leaves its
victims released.
"""

import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sched_helpers import cluster, job

from scheduler import ValidationError, consolidation, preemption
from scheduler.consolidation import _movers_may_fit, _rehomer, _room_options, _surroundings, _try
from scheduler.resources import GPU
from scheduler.victim_nodes import usable

HOUR = 3600.0


def reference(state, index, w, max_moves):
    on_node, spare, lenders, room_elsewhere = _surroundings(state, index, w)
    tree = state.tree
    own_chain = tree.chain[w.queue]
    need = w.request.get(GPU, 0)
    options = []
    for name, holders in on_node.items():
        n = state.inventory.nodes[name]
        held = sum(len(a.gpus) for v in holders for a in v.placement if a.node == name)
        if not usable(n, w) or n.spec.gpus < need or len(n.free_gpus) + held < need:
            continue
        room = math.inf if any(len(v.placement) > 1 for v in holders) else \
            max(room_elsewhere(name), len(n.free_gpus) + held - need)
        options += _room_options(n, name, holders, w, own_chain, tree, spare, max_moves, state.classes, room)
    options.sort(key=lambda o: o[0])
    for _, evict, move in options:
        if not _movers_may_fit(state.inventory, w, evict, move, room_elsewhere):
            continue
        rehome = _rehomer(state, lenders, spare, evict, move[0].placement[0].node) if lenders else None
        done = _try(state, w, evict, move, lambda: True, lambda: state.inventory.place(w), None, rehome)
        if done is not None:
            return done
    return None


# Team t0 is owed (a large guarantee, little use); the others fill the nodes with small work,
# borrowing, so that room for t0 is scattered and plans compete across nodes.
recipes = st.fixed_dictionaries({
    "guarantees": st.tuples(st.integers(12, 24), st.lists(st.integers(0, 10), min_size=1, max_size=3)),
    "steps": st.lists(st.lists(st.tuples(st.sampled_from([0, 1, 1, 2, 2, 3]), st.sampled_from([1, 1, 1, 2, 2, 4]),
                                         st.sampled_from(["training", "training", "training", "batch"]),
                                         st.sampled_from([1, 1, 1, 1, 2])),
                               min_size=4, max_size=20), min_size=1, max_size=4),
    "owed": st.sampled_from([4, 6, 8]),
    "moves": st.integers(1, 4),
})


def build(recipe):
    """The cluster of ``recipe``, its owed workload, and the order each workload was made in."""
    own, others = recipe["guarantees"]
    guarantees = [own] + others
    s = cluster(nodes=6, gpus=8, queues=[{"name": f"t{i}", "guaranteed": {"gpu": g}}
                                         for i, g in enumerate(guarantees)])
    made = []
    for step, jobs in enumerate(recipe["steps"]):
        for team, gpus, kind, workers in jobs:
            try:
                made.append(job(s, f"t{team % len(guarantees)}", gpus=gpus, kind=kind, now=step * 1000,
                                workers=workers, time_limit=10 * HOUR))
            except ValidationError:
                pass
        s.cycle(now=step * 1000)
    owed = job(s, "t0", gpus=recipe["owed"], now=50_000, time_limit=HOUR)
    made.append(owed)
    return s, owed, {w.id: i for i, w in enumerate(made)}


def outcome(plan, order):
    if plan is None:
        return None
    return (sorted(order[v.id] for v in plan.evict),
            sorted((order[v.id], [(a.node, sorted(a.gpus)) for a in where]) for v, where in plan.moves),
            [(a.node, sorted(a.gpus)) for a in plan.placement])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipes)
def test_the_lazy_plan_is_the_plan_of_scoring_every_node(recipe):
    got, want = [], []
    for out, plan in ((got, consolidation.plan), (want, None)):
        s, owed, order = build(recipe)
        assume(s.state.tree.within_guarantee(owed.queue, owed.total) is None)   # else not asked
        index = preemption.VictimIndex(s.state, 100_000.0)
        if plan is not None:
            out.append(plan(s.state, index, owed, lambda: True, lambda: s.state.inventory.place(owed),
                            recipe["moves"], None))
        else:
            out.append(reference(s.state, index, owed, recipe["moves"]))
        out[-1] = outcome(out[-1], order)
    assert got == want
