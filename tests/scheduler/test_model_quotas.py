"""Quotas per GPU model hold for work that asks for any GPU: a model some queue has a quota for
(``gpu:h100`` in a guarantee, limit, ...) takes only work that names it, so a plain ``gpu`` request
can neither slip past a ``gpu:h100: 0`` limit nor take GPUs guaranteed per model."""

from __future__ import annotations

import pytest

from scheduler import Scheduler, ValidationError
from scheduler.model import PENDING


def two_models(limit=None) -> Scheduler:
    s = Scheduler()
    s.put_node({"name": "a", "gpus": 8, "gpu_model": "a100", "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_node({"name": "h", "gpus": 8, "gpu_model": "h100", "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "org"}, now=0)
    s.put_queue({"name": "team", "parent": "org", "guaranteed": {"gpu": 16}, **({"limit": limit} if limit else {})},
                now=0)
    return s


def submit(s, gpus=8, now=0, **extra):
    return s.submit({"user": "ada", "queue": "team", "kind": "training", "resources": {"gpu": gpus}, **extra}, now=now)


def test_a_limit_of_zero_on_a_model_keeps_any_gpu_work_off_it():
    s = two_models(limit={"gpu": 16, "gpu:h100": 0})
    first, second = submit(s), submit(s)
    s.cycle(now=0)
    assert [a.node for a in first.placement] == ["a"]
    assert second.state == PENDING          # the H100 node is free, but not for this queue's plain GPUs
    why = s.explain(second.id, now=1)["reason"]
    assert "8 × any GPU" in why and "uses 8/8 GPUs" in why, why       # the H100s are not counted as "any"
    with pytest.raises(ValidationError, match="8 h100 GPUs but queue .team. is limited to 0"):
        submit(s, gpu_model="h100")
    s.mark_finished(first.id, now=60)
    s.cycle(now=60)
    assert [a.node for a in second.placement] == ["a"]


def test_without_model_quotas_any_gpu_work_uses_every_model():
    s = two_models()
    jobs = [submit(s), submit(s)]
    s.cycle(now=0)
    assert sorted(a.node for w in jobs for a in w.placement) == ["a", "h"]


def test_a_model_quota_set_later_applies_from_the_next_cycle():
    s = two_models()
    s.put_queue({"name": "team", "parent": "org", "guaranteed": {"gpu": 16}, "limit": {"gpu:h100": 0}}, now=0)
    jobs = [submit(s), submit(s)]
    s.cycle(now=0)
    assert [a.node for w in jobs for a in w.placement] == ["a"]
    s.put_queue({"name": "team", "parent": "org", "guaranteed": {"gpu": 16}}, now=10)    # lifted again
    s.cycle(now=10)
    assert sorted(a.node for w in jobs for a in w.placement) == ["a", "h"]


def test_work_that_fits_only_on_a_managed_model_is_refused_at_submission_with_the_way_out():
    s = Scheduler()
    s.put_node({"name": "small", "gpus": 2, "gpu_model": "a100", "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_node({"name": "big", "gpus": 8, "gpu_model": "h100", "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "org"}, now=0)
    s.put_queue({"name": "team", "parent": "org", "guaranteed": {"gpu": 10, "gpu:h100": 8}}, now=0)
    with pytest.raises(ValidationError, match=r"GPUs of model h100 take only work that asks for that model"):
        submit(s, gpus=4)
    w = submit(s, gpus=4, gpu_model="h100")
    s.cycle(now=0)
    assert [a.node for a in w.placement] == ["big"]
