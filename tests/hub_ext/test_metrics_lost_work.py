"""The service's Prometheus metrics count the work preemption threw away, where the victims
declare their checkpoints (the scrape itself, scopes included, is tested in test_flow.py)."""

import sys
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))
from sched_helpers import cluster, job  # noqa: E402

from hub_ext.metrics import Metrics  # noqa: E402

HOUR = 3600.0


def test_lost_gpu_seconds_are_counted_per_queue_only_where_known():
    s = cluster(nodes=1, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}}])
    s.put_class({"name": "training", "rank": 200, "preempt_after": 600, "checkpoint_every": 1800, "startup": 60},
                now=0)
    metrics = Metrics(SimpleNamespace(sched=s))
    long_ = [job(s, "a", gpus=2, time_limit=100 * HOUR, now=0) for _ in range(2)]
    s.cycle(now=0)
    for w in long_:
        s.mark_running(w.id, now=0)
    job(s, "a", gpus=2, time_limit=HOUR, now=1900)
    res = s.cycle(now=1900)                       # 40 s after the first checkpoint (60 + 1,800)
    metrics.observe_cycle(res)
    (victim, _), = res.preempted
    text = generate_latest(metrics.registry).decode()
    assert 'computehub_preemptions_total{queue="a"} 1.0' in text
    assert 'computehub_preempted_work_lost_gpu_seconds_total{queue="a"} 80.0' in text      # 40 s × 2 GPUs


def test_work_at_risk_is_what_preempting_everything_now_would_lose(monkeypatch):
    # Team a's class declares checkpoints every 30 minutes after a minute of loading; team b's
    # work declares nothing, one of its jobs reports its saves, and a notebook is never preempted.
    s = cluster(nodes=2, gpus=4, queues=[{"name": "a", "guaranteed": {"gpu": 4}},
                                         {"name": "b", "guaranteed": {"gpu": 4}}])
    s.put_class({"name": "training", "rank": 200, "preempt_after": 600, "checkpoint_every": 1800, "startup": 60},
                now=0)
    s.put_class({"name": "batch", "rank": 100}, now=0)
    a = job(s, "a", gpus=2, time_limit=100 * HOUR, now=0)
    b1, b2 = (job(s, "b", gpus=1, time_limit=100 * HOUR, priority="batch", now=0) for _ in range(2))
    s.cycle(now=0)
    for w in (a, b1, b2):
        s.mark_running(w.id, now=0)
    s.report_checkpoint(b2.id, at=1000, now=1000)
    monkeypatch.setattr("hub_ext.metrics.time.time", lambda: 2000.0)
    text = generate_latest(Metrics(SimpleNamespace(sched=s)).registry).decode()
    # a: (2,000 - 60) mod 1,800 = 140 s × 2 GPUs; b: 1,000 s × 1 GPU since b2's report, and b1
    # is not known to save at all.
    assert 'computehub_work_at_risk_gpu_seconds{queue="a"} 280.0' in text, text
    assert 'computehub_work_at_risk_gpu_seconds{queue="b"} 1000.0' in text, text
    assert 'computehub_running_without_checkpoints{queue="a"} 0.0' in text
    assert 'computehub_running_without_checkpoints{queue="b"} 1.0' in text
