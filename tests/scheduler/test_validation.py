"""Bad input is refused with a clear error before it touches state."""

import pytest
from sched_helpers import cluster

from scheduler import Conflict, NotFound, ValidationError

GOOD = {"user": "ada", "queue": "a", "kind": "training", "resources": {"gpu": 1}}


def _state(s):
    return (dict(s.state.workloads), len(s.events()), {k: dict(v) for k, v in s.state.tree.usage.items()},
            s.next_seq)


@pytest.mark.parametrize("change, error, words", [
    ({"resources": {"gpu": -1}}, ValidationError, "must not be negative"),
    ({"resources": {"gpu": 1.5}}, ValidationError, "whole number"),
    ({"resources": {"gpu": 10**9}}, ValidationError, "absurdly large"),
    ({"resources": {"cpu": "-2"}}, ValidationError, "cpu"),
    ({"resources": {"memory": "lots"}}, ValidationError, "memory must look like"),
    ({"resources": {"tpu": 1}}, ValidationError, "unknown resource 'tpu'"),
    ({"resources": {"gpu": 9}}, ValidationError, "no node in the cluster can hold"),
    ({"resources": {"gpu": 8}, "workers": 3}, ValidationError, "larger than the cluster (16"),
    ({"workers": 0}, ValidationError, "workers must be"),
    ({"queue": "nope"}, NotFound, "unknown queue 'nope'"),
    ({"queue": "org"}, ValidationError, "has sub-queues"),
    ({"priority": "vip"}, NotFound, "unknown priority class 'vip'"),
    ({"kind": "game"}, ValidationError, "kind must be one of"),
    # JSON that is not text where text is due (found by the API fuzzer: a list crashed the lookup)
    ({"priority": [None]}, ValidationError, "priority must be the name of a priority class"),
    ({"kind": ["batch"]}, ValidationError, "kind must be one of"),
    ({"name": []}, ValidationError, "name must be text"),
    ({"metadata": []}, ValidationError, "metadata must be a mapping"),
    # keys ComputeHub writes: a fake launcher status (a served endpoint) or a queue jump
    ({"metadata": {"status": {"endpoint": "http://elsewhere"}}}, ValidationError, "'status' are set by ComputeHub"),
    ({"metadata": {"moved_for": "w1", "ran_s": 1e9}}, ValidationError, "'ran_s', 'moved_for' are set by"),
    ({"metadata": {"queued_at": 0}}, ValidationError, "'queued_at' are set by ComputeHub"),
    ({"time_limit": -5}, ValidationError, "time_limit"),
    ({"time_limit": "banana"}, ValidationError, "time_limit"),
    ({"gpu_model": "h100"}, ValidationError, "no node in the cluster can hold"),
    ({"node_selector": {"zone": 1}}, ValidationError, "node_selector"),
    ({"user": ""}, ValidationError, "user must be"),
    ({"surprise": 1}, ValidationError, "unknown workload field"),
    ({"resources": {"gpu": 3}, "kind": "notebook"}, ValidationError, "runs only inside guaranteed quota"),
])
def test_bad_submissions_are_refused_and_change_nothing(change, error, words):
    s = cluster(nodes=2, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 2}, "limit": {"gpu": 12}},
                                          {"name": "b"}])
    before = _state(s)
    with pytest.raises(error) as exc:
        s.submit({**GOOD, **change}, now=0)
    assert words in exc.value.message
    assert exc.value.to_dict()["error"] in ("invalid", "not_found")
    assert _state(s) == before


def test_over_queue_limit_and_user_limit_are_refused_at_submit():
    s = cluster(nodes=2, gpus=8, queues=[{"name": "a", "limit": {"gpu": 4}, "user_limit": {"gpu": 2}}])
    with pytest.raises(ValidationError, match="limited to 4"):
        s.submit({**GOOD, "resources": {"gpu": 5}}, now=0)
    with pytest.raises(ValidationError, match="your limit in queue 'a' is 2"):
        s.submit({**GOOD, "resources": {"gpu": 3}}, now=0)


@pytest.mark.parametrize("queue, words", [
    ({"name": "x", "parent": "org", "guaranteed": {"gpu": 4}, "limit": {"gpu": 2}}, "is below its guarantee"),
    ({"name": "x", "parent": "ghost"}, "unknown parent"),
    ({"name": "x", "parent": "org", "weight": 0}, "weight"),
    ({"name": "x", "parent": "org", "weight": -1}, "weight"),
    ({"name": "bad name!"}, "queue name"),
    ({"name": "x", "guaranteed": {"gpu": -2}}, "must not be negative"),
    ({"name": "x", "idle": {"warn_after": 100, "release_after": 50}}, "warn_after"),
    ({"name": "x", "colour": "red"}, "unknown queue field"),
    ({"name": "org", "parent": "a"}, "cycle"),
    ({"name": "x", "parent": "org", "may_borrow": "false"}, "may_borrow must be true or false, not 'false'"),
    ({"name": "x", "parent": "org", "description": {"text": "vision"}}, "description must be text"),
])
def test_bad_queues_are_refused(queue, words):
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 4}}])
    before = {k: v.to_dict() for k, v in s.state.tree.specs.items()}
    with pytest.raises(ValidationError) as exc:
        s.put_queue(queue, now=0)
    assert words in exc.value.message
    assert {k: v.to_dict() for k, v in s.state.tree.specs.items()} == before


def test_children_guarantees_must_fit_in_the_parent():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 4}}])
    s.put_queue({"name": "org", "guaranteed": {"gpu": 6}}, now=0)
    with pytest.raises(ValidationError, match="more than 'org' itself"):
        s.put_queue({"name": "b", "parent": "org", "guaranteed": {"gpu": 3}}, now=0)


def test_bad_classes_and_nodes_are_refused():
    s = cluster(nodes=1, gpus=8)
    with pytest.raises(ValidationError, match="cannot borrow"):
        s.put_class({"name": "vip", "rank": 10, "preemptible": False, "may_borrow": True})
    with pytest.raises(ValidationError, match="preempt_after"):
        s.put_class({"name": "vip", "rank": 10, "preempt_after": -1})
    with pytest.raises(ValidationError, match="not plausible"):
        s.put_node({"name": "huge", "gpus": 1000})
    with pytest.raises(ValidationError, match="gpu_model"):
        s.put_node({"name": "n9", "gpus": 8, "gpu_model": "A 100!"})
    assert "vip" not in s.state.classes and "huge" not in s.state.inventory.nodes
    # Yes/no fields take true or false only: "false" read as a truthy string would flip them.
    for field in ("preemptible", "may_borrow", "requeue", "saves_on_stop"):
        with pytest.raises(ValidationError, match=f"{field} must be true or false, not 'no'"):
            s.put_class({"name": "vip", "rank": 10, field: "no"})
    for field in ("healthy", "draining"):
        with pytest.raises(ValidationError, match=f"{field} must be true or false, not 0"):
            s.put_node({"name": "n9", "gpus": 8, field: 0})
    assert "vip" not in s.state.classes
    with pytest.raises(ValidationError, match="rank must be a whole number, not 1.5"):
        s.put_class({"name": "vip", "rank": 1.5})
    with pytest.raises(ValidationError, match="description must be text of at most 2000"):
        s.put_class({"name": "vip", "rank": 1, "description": ["a list"]})
    assert s.put_class({"name": "vip", "rank": 2.0, "description": None}).rank == 2     # 2.0 is whole
    assert s.state.classes["vip"].description == ""
    assert "n9" not in s.state.inventory.nodes


def test_conflicts_are_reported_not_crashed():
    s = cluster(nodes=1, gpus=8)
    w = s.submit(GOOD, now=0)
    with pytest.raises(Conflict, match="still has 1"):
        s.delete_queue("a")
    with pytest.raises(Conflict, match="sub-queues"):
        s.delete_queue("org")
    with pytest.raises(Conflict, match="used by pending"):
        s.delete_class("training")
    s.cancel(w.id, now=1)
    with pytest.raises(Conflict, match="already ended"):
        s.cancel(w.id, now=2)
    with pytest.raises(NotFound):
        s.cancel("w9999999")
    with pytest.raises(Conflict):
        s.mark_running(w.id)
