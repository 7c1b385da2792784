"""The scheduler's state as Prometheus gauges, read from memory at scrape time (metrics.py serves
them): workloads, GPUs, queues against their quotas, why work waits and for how long, and
the progress preemption would throw away. One walk over live work per scrape; no database.

Labels stay bounded: queues, priority classes and GPU flavors (all set by admins) and fixed
sets of states and reasons; never users or workload ids.
"""

from __future__ import annotations

import time

from prometheus_client.core import GaugeMetricFamily

from scheduler.blockers import (CAPACITY, GUARANTEE_ONLY, LENDING, MADE_ROOM, NO_BORROW, NO_NODE, QUEUE_LIMIT,
                                RESERVED, STRICT_ORDER, USER_LIMIT, WAITING_PREEMPTION)
from scheduler.model import AWAITING_APPROVAL, HOLDING, PENDING, RUNNING, STOP_OVERDUE, STOPPING
from scheduler.preemption import since_checkpoint
from scheduler.resources import FLAVOR_PREFIX, GPU

# The last cycle's verdict on pending work (scheduler/blockers.py), by what would resolve it.
REASONS = {QUEUE_LIMIT: "quota", USER_LIMIT: "quota", GUARANTEE_ONLY: "quota", NO_BORROW: "quota",
           LENDING: "quota", CAPACITY: "capacity", RESERVED: "capacity", NO_NODE: "unplaceable",
           WAITING_PREEMPTION: "preemption", MADE_ROOM: "preemption", STRICT_ORDER: "order"}
# Every value the reason label takes ("fragmentation": enough GPUs are free in all, but no node
# has them together; "approval": an admin's decision; "new": no cycle has looked at it yet).
REASON_LABELS = ("approval", "capacity", "fragmentation", "new", "order", "preemption", "quota", "unplaceable")


def reason(blocker) -> str:
    if blocker is None:
        return "new"
    if blocker.code == CAPACITY and blocker.cap - blocker.used >= blocker.need > 0:
        return "fragmentation"
    return REASONS.get(blocker.code, "capacity")


class StateCollector:
    def __init__(self, service):
        self.service = service

    def collect(self):
        sched = self.service.sched
        if sched.stale:
            # Memory may hold what the database does not (a transaction failed and could not be
            # read back): computehub_database_up says so; nothing is shown from it meanwhile.
            return
        st, now = sched.state, time.time()
        yield from self._workloads(st)
        yield from self._gpus(st)
        yield from self._queues(st)
        yield from self._waiting(sched, st, now)
        yield from self._checkpoints(st, now)
        yield from self._stop_overdue(st)

    @staticmethod
    def _workloads(st):
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

    @staticmethod
    def _gpus(st):
        capacity = GaugeMetricFamily("computehub_gpus_capacity", "GPUs on schedulable nodes by flavor",
                                     labels=["flavor"])
        # The same, under its first name: a gauge should not end in _total (kept for dashboards).
        total = GaugeMetricFamily("computehub_gpus_total", "Deprecated: computehub_gpus_capacity",
                                  labels=["flavor"])
        used = GaugeMetricFamily("computehub_gpus_allocated", "GPUs allocated by flavor", labels=["flavor"])
        inv = st.inventory
        for key in sorted(k for k in inv.capacity if k == GPU or k.startswith(FLAVOR_PREFIX)):
            flavor = "all" if key == GPU else key[len(FLAVOR_PREFIX):]
            capacity.add_metric([flavor], inv.capacity[key])
            total.add_metric([flavor], inv.capacity[key])
            used.add_metric([flavor], inv.capacity[key] - inv.free.get(key, 0))
        nodes = GaugeMetricFamily("computehub_nodes", "Nodes by status: schedulable, draining (cordoned) or "
                                  "unhealthy; only schedulable nodes count in computehub_gpus_capacity",
                                  labels=["status"])
        gpus = GaugeMetricFamily("computehub_node_gpus", "GPUs on nodes by the node's status", labels=["status"])
        by: dict[str, list[int]] = {s: [0, 0] for s in ("draining", "schedulable", "unhealthy")}
        for n in inv.nodes.values():
            s = "unhealthy" if not n.spec.healthy else "draining" if n.spec.draining else "schedulable"
            by[s][0] += 1
            by[s][1] += n.spec.gpus
        for s, (count, g) in by.items():
            nodes.add_metric([s], count)
            gpus.add_metric([s], g)
        yield from (capacity, total, used, nodes, gpus)

    @staticmethod
    def _queues(st):
        """GPUs (of any model) each queue uses against its guarantee (a parent's is at least its
        children's) and its limit (none: no series); a parent's use is its subtree's."""
        tree = st.tree
        used = GaugeMetricFamily("computehub_queue_gpus_in_use", "GPUs held by the queue's work (its "
                                 "subtree's for a parent queue)", labels=["queue"])
        guaranteed = GaugeMetricFamily("computehub_queue_gpus_guaranteed", "GPUs guaranteed to the queue",
                                       labels=["queue"])
        limit = GaugeMetricFamily("computehub_queue_gpus_limit", "GPU limit of the queue (no series: no limit)",
                                  labels=["queue"])
        for q in sorted(tree.specs):
            used.add_metric([q], tree.usage[q].get(GPU, 0))
            guaranteed.add_metric([q], tree.guaranteed[q].get(GPU, 0))
            if GPU in tree.limit[q]:
                limit.add_metric([q], tree.limit[q][GPU])
        yield from (used, guaranteed, limit)

    @staticmethod
    def _waiting(sched, st, now: float):
        """Waiting work per queue by why it waits; the longest waits; the wait of work its
        queue's unused guarantee covers (work the queue is owed should not wait long). A wait
        is since the work last entered the queue: a requeued job's runs are not waiting."""
        blockers = sched.last.blockers if sched.last is not None else {}
        tree = st.tree
        waiting: dict[tuple[str, str], int] = {}
        gpus: dict[str, int] = {}
        oldest: dict[tuple[str, str], float] = {}
        owed: dict[str, float] = {q: 0.0 for q in tree.specs if tree.is_leaf(q)}
        for w in st.workloads.values():
            if w.state == PENDING:
                b = blockers.get(w.id)
                why = reason(b)
                gpus[w.queue] = gpus.get(w.queue, 0) + w.gpus
                if w.gpus and (b is None or b.code not in (USER_LIMIT, NO_NODE)) and w.queue in owed \
                        and tree.within_guarantee(w.queue, w.total) is None:
                    owed[w.queue] = max(owed[w.queue], now - w.waiting_since)
            elif w.state == AWAITING_APPROVAL:
                why = "approval"
            else:
                continue
            waiting[(w.queue, why)] = waiting.get((w.queue, why), 0) + 1
            key = (w.queue, "awaiting_approval" if why == "approval" else "pending")
            oldest[key] = max(oldest.get(key, 0.0), now - w.waiting_since)
        fam = GaugeMetricFamily("computehub_waiting_workloads", "Workloads waiting (pending or awaiting "
                                "approval) by queue and why: " + ", ".join(REASON_LABELS), labels=["queue", "reason"])
        for key, n in sorted(waiting.items()):
            fam.add_metric(list(key), n)
        yield fam
        fam = GaugeMetricFamily("computehub_pending_gpus", "GPUs asked for by pending work", labels=["queue"])
        for q, n in sorted(gpus.items()):
            fam.add_metric([q], n)
        yield fam
        fam = GaugeMetricFamily("computehub_oldest_waiting_seconds", "How long the longest-waiting workload of "
                                "the queue has waited since it was submitted or last requeued (pending or "
                                "awaiting_approval)",
                                labels=["queue", "state"])
        for key, age in sorted(oldest.items()):
            fam.add_metric(list(key), max(0.0, age))
        yield fam
        fam = GaugeMetricFamily("computehub_queue_owed_wait_seconds", "Longest wait of pending GPU work that "
                                "fits in its queue's unused guarantee now (work the queue is owed); 0 if none",
                                labels=["queue"])
        for q, age in sorted(owed.items()):
            fam.add_metric([q], max(0.0, age))
        yield fam

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

    @staticmethod
    def _stop_overdue(st):
        """Work told to stop that no launcher reported stopped within the service's
        ``stop_deadline``, per queue (a series for every queue, 0 where none): its GPUs stay
        held, unused, until one does (scheduler/stop_deadline.py)."""
        count = GaugeMetricFamily("computehub_stop_overdue_workloads",
                                  "Workloads told to stop (preempted, cancelled, reclaimed) and not "
                                  "reported stopped within the stop deadline: what they hold stays held "
                                  "until they are",
                                  labels=["queue"])
        gpus = GaugeMetricFamily("computehub_stop_overdue_gpus",
                                 "GPUs held by work told to stop and not reported stopped within the "
                                 "stop deadline",
                                 labels=["queue"])
        n = {q: 0 for q in st.tree.specs}
        g = dict(n)
        for w in st.holding.values():
            if w.state in STOPPING and STOP_OVERDUE in w.metadata:
                n[w.queue] = n.get(w.queue, 0) + 1
                g[w.queue] = g.get(w.queue, 0) + w.gpus
        for q in sorted(n):
            count.add_metric([q], n[q])
            gpus.add_metric([q], g[q])
        yield count
        yield gpus
