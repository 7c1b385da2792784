"""The service's housekeeping, every ``retention_interval`` on a worker thread (so the API and
the scheduling cycles go on meanwhile): history older than its retention is deleted (ended
workloads and their logs, the audit log, the GPU-hour ledger: Slurm's PurgeJobAfter /
PurgeEventAfter / PurgeUsageAfter), in short batches; live work and open ledger intervals are
never touched. Then the database's query planner statistics are refreshed (also at start), so
that reads of a long history keep using the right indexes. Mixed into ``ComputeHubService``."""

from __future__ import annotations

import asyncio
import os
import time

from traitlets import Float, HasTraits, validate

from scheduler.config_checks import check_number
from scheduler.errors import StoreUnavailable

DAY = 86400.0


class Housekeeping(HasTraits):
    """Needs ``sched`` (its store), ``logs_dir`` and ``log``; ``housekeeping_loop`` runs beside
    the service."""

    workload_retention_days = Float(
        0.0, config=True,
        help="""Days an ended workload (finished, failed, cancelled, ...) is kept after it ended:
        what `computehub jobs --all`, %jobs --all and GET workloads?state=... show, and its log
        (by the log's last write). Older ones are deleted (their ids are never handed out
        again). 0 = keep them for good.""")
    audit_retention_days = Float(
        0.0, config=True,
        help="""Days the audit log (every admin action and scheduler decision, GET audit, the admin
        page's audit view) keeps an event. 0 = keep every event for good.""")
    usage_retention_days = Float(
        0.0, config=True,
        help="""Days a closed GPU-hour ledger interval is kept after it ended: usage and cost reports
        (GET usage, computehub usage) over older windows come out short once it is gone. Fair
        share does not read it. 0 = keep the ledger for good.""")
    retention_interval = Float(
        3600.0, config=True,
        help="Seconds between two rounds of housekeeping: purging history older than its retention, "
             "refreshing the database's planner statistics (the first round runs a minute after the "
             "start, or this long if shorter).")

    @validate("workload_retention_days", "audit_retention_days", "usage_retention_days")
    def _retention_days(self, proposal):
        return check_number(f"ComputeHubService.{proposal.trait.name}", proposal.value, low=0, unit="days")

    @validate("retention_interval")
    def _retention_interval(self, proposal):
        return check_number("ComputeHubService.retention_interval", proposal.value, low=0, low_open=True,
                            unit="seconds")

    def retains_everything(self) -> bool:
        return not (self.workload_retention_days or self.audit_retention_days or self.usage_retention_days)

    def purge_history(self, live: set[str], now: float | None = None) -> dict[str, int]:
        """Delete what is older than its retention now; how many rows of each kind went.
        ``live``: the ids of work that waits or runs (taken on the event loop: this runs on a
        worker thread, and the scheduler's memory is the loop's)."""
        now = time.time() if now is None else now

        def before(days: float) -> float | None:
            return now - days * DAY if days else None

        gone = self.sched.store.purge_history(
            workloads_before=before(self.workload_retention_days),
            events_before=before(self.audit_retention_days),
            allocations_before=before(self.usage_retention_days))
        if self.workload_retention_days:
            gone["job logs"] = self._purge_logs(before(self.workload_retention_days), live)
        return gone

    def _purge_logs(self, cutoff: float, live: set[str]) -> int:
        """Job logs (``<logs_dir>/<id>.log``) last written before ``cutoff`` whose workload
        neither waits nor runs: they go with the ended workloads' records."""
        n = 0
        try:
            entries = list(os.scandir(self.logs_dir))
        except FileNotFoundError:
            return 0
        for e in entries:
            wid, ext = os.path.splitext(e.name)
            try:
                if ext == ".log" and wid not in live and e.is_file(follow_symlinks=False) \
                        and e.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(e.path)
                    n += 1
            except FileNotFoundError:
                pass
        return n

    def housekeeping(self, live: set[str]) -> dict[str, int]:
        """One round (on a worker thread, so not bounded by ``database_timeout``: the event loop
        does not wait on it): the purge, then the planner statistics."""
        with self.sched.store.unbounded():
            gone = self.purge_history(live) if not self.retains_everything() else {}
            self.sched.store.refresh_statistics()
        return gone

    async def housekeeping_loop(self) -> None:
        await asyncio.sleep(min(60.0, self.retention_interval))
        while True:
            try:
                gone = await asyncio.to_thread(self.housekeeping, set(self.sched.state.workloads))
            except StoreUnavailable as e:
                self.log.warning("housekeeping skipped: the database is unavailable (%s); trying again in "
                                 "%.0f s", e.detail, self.retention_interval)
            except Exception:       # noqa: BLE001 - a failed round must not stop the next one
                self.log.exception("housekeeping failed; trying again in %.0f s", self.retention_interval)
            else:
                if any(gone.values()):
                    self.log.info("purged history past its retention: %s",
                                  ", ".join(f"{n} {kind}" for kind, n in gone.items()))
            await asyncio.sleep(self.retention_interval)
