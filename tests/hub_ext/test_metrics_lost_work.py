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
