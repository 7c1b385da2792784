"""Group commit of submissions: one transaction for all that arrive together.

``submit`` queues a submission and waits. One batch is written at a time; submissions
that arrive while it is being written wait together and become the next batch. A batch
is prepared (validated, ids and order assigned: ``Scheduler.prepare_submissions``),
written in one transaction (``write_submissions``: one multi-row INSERT for workloads and
one for events), and only then applied to the scheduler's memory and answered. A batch
the database refuses is dropped whole and each of its callers gets the same 503: nothing
was accepted, nothing half-written; or, when the connection broke while committing
(PostgreSQL), that the batch may or may not have been accepted, and memory is rebuilt
from the database, so it shows whichever it was. Nobody gets a 201 for work that is not
durable.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from scheduler import SchedulerError, StoreUnavailable

from .base import APIError


class GroupCommit:
    def __init__(self, service):
        self.service = service
        self._waiting: list = []
        self._flushing = False
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="computehub-writer")

    async def submit(self, spec: dict):
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((spec, fut))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush_all())
        return await fut

    async def _flush_all(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._flush(batch)
        finally:
            self._flushing = False

    async def _flush(self, entries: list) -> None:
        svc = self.service
        sched = svc.sched
        error = None
        try:
            batch = sched.prepare_submissions([s for s, _ in entries], now=time.time())
        except Exception as e:
            error, batch = e, None
        if batch is not None:
            try:
                if svc.write_on_thread:
                    # The commit (an fsync on SQLite) waits here while the loop serves others.
                    await asyncio.get_running_loop().run_in_executor(self._writer, sched.write_submissions, batch)
                else:
                    sched.write_submissions(batch)
            except Exception as e:
                sched.drop_submissions(batch, e)      # rebuilds memory if the commit is in doubt
                error, batch = e, None
        if batch is None:
            refusal = self._refusal(error, len(entries))
            for _, fut in entries:
                if not fut.done():
                    fut.set_exception(refusal)
            return
        sched.apply_submissions(batch)
        for (_, fut), r in zip(entries, batch.results):
            if fut.done():          # the client went away; the workload stays accepted
                continue
            if isinstance(r, SchedulerError):
                fut.set_exception(r)
            else:
                fut.set_result(r)
        svc.changed()

    def _refusal(self, e: Exception, n: int) -> APIError:
        """What every caller of a failed batch is told: the same, and true."""
        log = self.service.log
        if isinstance(e, StoreUnavailable):
            log.warning("submission batch of %d not written, database unavailable%s: %s", n,
                        " (commit in doubt)" if e.in_doubt else "", e.detail)
            if e.in_doubt:
                return APIError(503, e.code, "the connection to the database broke while your submission was "
                                             "being committed: it may or may not have been accepted; list your "
                                             "workloads before submitting it again")
            return APIError(503, e.code, "the database is unavailable (unreachable, restarting, out of disk "
                                         "space or read-only); nothing was accepted, try again shortly")
        log.error("submission batch of %d failed; none was accepted", n, exc_info=e)
        return APIError(503, "unavailable", "the submission could not be written (the service log has the "
                                            "details); nothing was accepted, try again")
