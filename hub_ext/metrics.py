"""Prometheus metrics at ``/services/computehub/metrics`` (JupyterHub's naming style).

Gauges are read from the scheduler's state at scrape time; histograms and
counters are fed as cycles run. Reading needs the hub's ``read:metrics`` scope
(or ComputeHub's admin scope) unless ``authenticate_metrics`` is off.
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from scheduler.model import HOLDING, PENDING, RUNNING
from scheduler.preemption import since_checkpoint
from scheduler.resources import FLAVOR_PREFIX

from .base import BaseHandler
from .scopes import ADMIN, READ_METRICS

WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, float("inf"))
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, float("inf"))


class _StateCollector:
    def __init__(self, service):
        self.service = service

    def collect(self):
        st = self.service.sched.state
        workloads = GaugeMetricFamily("computehub_workloads", "Workloads by state, queue and priority class",
                                      labels=["state", "queue", "priority"])
        counts: dict[tuple, int] = {}
        for w in st.workloads.values():
            state = "pending" if w.state == PENDING else "running" if w.state in HOLDING else w.state
            key = (state, w.queue, w.priority)
            counts[key] = counts.get(key, 0) + 1
        for key, n in sorted(counts.items()):
            workloads.add_metric(list(key), n)
        yield workloads
        total = GaugeMetricFamily("computehub_gpus_total", "GPUs on schedulable nodes by flavor",
                                  labels=["flavor"])
        used = GaugeMetricFamily("computehub_gpus_allocated", "GPUs allocated by flavor", labels=["flavor"])
        inv = st.inventory
        for key in sorted(k for k in inv.capacity if k == "gpu" or k.startswith(FLAVOR_PREFIX)):
            flavor = "all" if key == "gpu" else key[len(FLAVOR_PREFIX):]
            total.add_metric([flavor], inv.capacity[key])
            used.add_metric([flavor], inv.capacity[key] - inv.free.get(key, 0))
        yield total
        yield used
        yield from self._checkpoints(st, time.time())

    @staticmethod
    def _checkpoints(st, now: float):
        """What preempting all running preemptible work now would throw away, per queue: the
        GPU-seconds since each job's last checkpoint (reported, or implied by a declared
        cadence), and how many jobs nothing is known of (they would lose their whole run)."""
        risk = GaugeMetricFamily("computehub_work_at_risk_gpu_seconds",
                                 "GPU-seconds of progress since the last checkpoint of running preemptible "
                                 "work (reported or declared): what preempting it all now would lose",
                                 labels=["queue"])
        unknown = GaugeMetricFamily("computehub_running_without_checkpoints",
                                    "Running preemptible workloads that neither report nor declare "
                                    "checkpoints: a preemption loses their whole run", labels=["queue"])
        at_risk: dict[str, float] = {}
        blind: dict[str, int] = {}
        for w in st.holding.values():
            cls = st.classes.get(w.priority)
            if w.state != RUNNING or cls is None or not cls.preemptible:
                continue
            lost = since_checkpoint(w, cls, now)
            at_risk.setdefault(w.queue, 0.0)
            blind.setdefault(w.queue, 0)
            if lost is None:
                blind[w.queue] += 1
            else:
                at_risk[w.queue] += lost * w.gpus
        for q in sorted(at_risk):
            risk.add_metric([q], at_risk[q])
            unknown.add_metric([q], blind[q])
        yield risk
        yield unknown


class Metrics:
    def __init__(self, service):
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_StateCollector(service))
        self.queue_wait = Histogram("computehub_queue_wait_seconds", "Time from submission to admission",
                                    ["queue"], buckets=WAIT_BUCKETS, registry=self.registry)
        self.cycle = Histogram("computehub_scheduling_cycle_duration_seconds", "Duration of a scheduling cycle",
                               buckets=CYCLE_BUCKETS, registry=self.registry)
        self.preemptions = Counter("computehub_preemptions", "Workloads preempted", ["queue"],
                                   registry=self.registry)
        self.reclaims = Counter("computehub_reclaims", "Idle workloads whose resources were taken back",
                                ["queue"], registry=self.registry)
        self.admissions = Counter("computehub_admissions", "Workloads admitted", ["queue"],
                                  registry=self.registry)
        self.preempted_work = Counter(
            "computehub_preempted_work_lost_gpu_seconds",
            "GPU-seconds of progress preemption threw away (since the victims' last checkpoints; "
            "only work that reports or declares its checkpoints is counted)", ["queue"], registry=self.registry)

    def observe_cycle(self, res) -> None:
        self.cycle.observe(res.seconds)
        for w in res.admitted:
            self.admissions.labels(w.queue).inc()
            self.queue_wait.labels(w.queue).observe(max(0.0, res.now - w.submitted_at))
        for v, _ in res.preempted:
            self.preemptions.labels(v.queue).inc()
            if v.id in res.lost:
                self.preempted_work.labels(v.queue).inc(res.lost[v.id] * v.gpus)


class MetricsHandler(BaseHandler):
    async def get(self):
        if self.service.authenticate_metrics:
            caller = self.caller
            self.require(caller.is_admin or READ_METRICS in caller.scopes or
                         any(s.startswith(READ_METRICS) for s in caller.scopes), "read metrics (read:metrics)")
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.service.metrics.registry))


__all__ = ["Metrics", "MetricsHandler", "ADMIN"]
