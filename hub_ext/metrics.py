"""Prometheus metrics at ``/services/computehub/metrics`` (JupyterHub's naming style).

Gauges are read from memory at scrape time: the scheduler's state (metrics_state.py) and the
service's health (metrics_health.py); histograms and counters are fed as cycles run and
requests are answered. Reading needs the hub's ``read:metrics`` scope (or ComputeHub's admin
scope) unless ``authenticate_metrics`` is off. docs/service.md lists every metric.
"""

from __future__ import annotations

import time  # noqa: F401 - tests fix the scrape's clock through hub_ext.metrics.time.time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import ProcessCollector

from scheduler.errors import StoreUnavailable

from .base import BaseHandler
from .metrics_health import Health, HealthCollector
from .metrics_state import StateCollector
from .scopes import ADMIN, READ_METRICS

WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, float("inf"))
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, float("inf"))
ESTIMATE_BUCKETS = CYCLE_BUCKETS[:-1] + (5.0, 10.0, 30.0, float("inf"))
# The 503s the service answers when what it depends on is away (errors the caller should retry).
UNAVAILABLE = ("database_unavailable", "hub_unavailable")
# Why a scheduling cycle failed: the database did not answer (it retries every cycle), another
# service took the database (this one stops), or anything else (a bug: the log has a traceback).
CYCLE_FAILURES = ("database_unavailable", "lost_exclusivity", "error")


class Metrics:
    def __init__(self, service):
        self.registry = CollectorRegistry(auto_describe=True)
        self.health = Health()
        self.registry.register(StateCollector(service))
        self.registry.register(HealthCollector(service, self.health))
        ProcessCollector(registry=self.registry)     # process_start_time_seconds: restarts
        self.queue_wait = Histogram("computehub_queue_wait_seconds", "Time from entering the queue (submission "
                                    "or the last requeue) to admission",
                                    ["queue"], buckets=WAIT_BUCKETS, registry=self.registry)
        self.estimate = Histogram(
            "computehub_start_estimate_duration_seconds", "Duration of one start estimate (a simulation of the "
            "line ahead, made in the service's worker thread for an explanation or a dry run)",
            buckets=ESTIMATE_BUCKETS, registry=self.registry)
        self.line_plan = Histogram(
            "computehub_line_plan_duration_seconds", "Duration of one line plan (a simulation of the whole "
            "line that gives every waiting workload its start estimate, made in the service's worker thread)",
            buckets=ESTIMATE_BUCKETS, registry=self.registry)
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
        self.unavailable = Counter(
            "computehub_unavailable_responses",
            "Requests answered 503 because the database (database_unavailable) or JupyterHub's API "
            "(hub_unavailable) did not answer", ["error"], registry=self.registry)
        for code in UNAVAILABLE:
            self.unavailable.labels(code)
        self.cycle_failures = Counter(
            "computehub_scheduling_cycle_failures",
            "Scheduling cycles that failed: database_unavailable (retried every cycle), lost_exclusivity "
            "(another service took the database; this one stops) or error (a bug: the log has a traceback)",
            ["reason"], registry=self.registry)
        for why in CYCLE_FAILURES:
            self.cycle_failures.labels(why)

    def observe_cycle(self, res) -> None:
        self.cycle.observe(res.seconds)
        self.health.last_cycle = res.now
        for w in res.admitted:
            self.admissions.labels(w.queue).inc()
            self.queue_wait.labels(w.queue).observe(max(0.0, res.now - w.waiting_since))
        for v, _ in res.preempted:
            self.preemptions.labels(v.queue).inc()
            if v.id in res.lost:
                self.preempted_work.labels(v.queue).inc(res.lost[v.id] * v.gpus)

    def cycle_failed(self, reason: str) -> None:
        self.cycle_failures.labels(reason if reason in CYCLE_FAILURES else "error").inc()

    def answered_unavailable(self, code: str) -> None:
        if code in UNAVAILABLE:
            self.unavailable.labels(code).inc()


class MetricsHandler(BaseHandler):
    # Served from memory even while it waits to be read back from the database: that is when
    # computehub_database_up must be seen (the state's gauges are left out meanwhile).
    needs_current_memory = False

    async def get(self):
        if self.service.authenticate_metrics:
            caller = self.caller
            self.require(caller.is_admin or READ_METRICS in caller.scopes or
                         any(s.startswith(READ_METRICS) for s in caller.scopes), "read metrics (read:metrics)")
        try:
            self.service.sched.ensure_current()
        except StoreUnavailable:
            pass
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.service.metrics.registry))


__all__ = ["Metrics", "MetricsHandler", "ADMIN"]
