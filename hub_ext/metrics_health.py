"""Whether the service itself is well, as Prometheus metrics (metrics.py serves them): its
database, its scheduling loop, JupyterHub's API, and when it last heard from each hub service
that calls it (the launcher, the inventory, spawners), and whether its mail goes out, all from
memory.
"""

from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


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
        yield from self.mail()          # served with mail off too (all 0): alerts read what is there

    def mail(self):
        svc = self.service
        fam = CounterMetricFamily("computehub_mails", "Mails to jobs' owners since the service started: "
                                  "sent (the SMTP server took it), refused (by the server, or no address) or "
                                  "over_limit (past mail_per_user_hour: not sent)", labels=["result"])
        fam.add_metric(["sent"], getattr(svc, "mail_sent", 0))
        fam.add_metric(["refused"], getattr(svc, "mail_refused", 0))
        fam.add_metric(["over_limit"], getattr(svc, "mail_over_limit", 0))
        yield fam
        fam = GaugeMetricFamily("computehub_mail_backlog_seconds",
                                "How long the oldest change whose mail has not gone out because the SMTP "
                                "server cannot be reached or fails has waited (0: mail is caught up, or off)")
        since = getattr(svc, "mail_waiting_since", None)
        fam.add_metric([], max(0.0, time.time() - since) if since is not None else 0.0)
        yield fam
