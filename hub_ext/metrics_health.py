"""Whether the service itself is well, as Prometheus metrics (metrics.py serves them): its
database, its scheduling loop, JupyterHub's API, and when it last heard from each hub service
that calls it (the launcher, the inventory, spawners), all from memory.
"""

from __future__ import annotations

import time

from prometheus_client.core import GaugeMetricFamily


class Health:
    """What handlers and the scheduling loop tell the metrics, between scrapes."""

    def __init__(self):
        self.last_cycle: float | None = None          # UNIX time the last cycle was made durable
        self.clients: dict[str, float] = {}           # hub service name -> UNIX time of its last request

    def client_seen(self, model: dict | None) -> None:
        """An authenticated request: remember when each hub *service* last called (their number
        is what the hub's admin configured; users are not recorded)."""
        if model and model.get("kind") == "service" and model.get("name"):
            self.clients[model["name"]] = time.time()


class HealthCollector:
    def __init__(self, service, health: Health):
        self.service, self.health = service, health

    def collect(self):
        sched = self.service.sched
        # The scheduling loop finds the database unavailable (it retries every cycle), or memory
        # waits to be read back from it: either way nothing new is scheduled or written.
        down = bool(getattr(self.service, "_db_down", False)) or sched.stale
        fam = GaugeMetricFamily("computehub_database_up", "1 while the service can use its database; 0 while "
                                "it cannot (API calls that need it answer 503 database_unavailable and "
                                "scheduling is paused until it answers again)")
        fam.add_metric([], 0 if down else 1)
        yield fam
        fam = GaugeMetricFamily("computehub_scheduling_cycle_last_success_timestamp_seconds",
                                "UNIX time of the last scheduling cycle made durable (absent before the first)")
        if self.health.last_cycle is not None:
            fam.add_metric([], self.health.last_cycle)
        yield fam
        fam = GaugeMetricFamily("computehub_client_last_request_timestamp_seconds",
                                "UNIX time of the last authenticated request of each JupyterHub service "
                                "calling ComputeHub (launcher, inventory, spawners, Prometheus), since this "
                                "service started", labels=["client"])
        for name, t in sorted(self.health.clients.items()):
            fam.add_metric([name], t)
        yield fam
