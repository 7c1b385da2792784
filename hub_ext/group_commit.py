"""Group commit of submissions: one transaction for all that arrive together.

``submit`` queues a submission and waits. One batch is written at a time; submissions
that arrive while it is being written wait together and become the next batch. A batch
is prepared (validated, ids and order assigned: ``Scheduler.prepare_submissions``),
written in one transaction (``write_submissions``: one multi-row INSERT for workloads and
one for events), and only then applied to the scheduler's memory and answered. A batch
the database refuses is dropped whole and each of its callers gets a 503: nothing was
accepted, nothing half-written.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from scheduler import SchedulerError

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
        try:
            batch = sched.prepare_submissions([s for s, _ in entries], now=time.time())
        except Exception:
            svc.log.exception("submission batch of %d failed; none was accepted", len(entries))
            batch = None
        if batch is not None:
            try:
                if svc.write_on_thread:
                    # The commit (an fsync on SQLite) waits here while the loop serves others.
                    await asyncio.get_running_loop().run_in_executor(self._writer, sched.write_submissions, batch)
                else:
                    sched.write_submissions(batch)
            except Exception:
                svc.log.exception("submission batch of %d failed; none was accepted", len(entries))
                sched.drop_submissions(batch)
                batch = None
        if batch is None:
            for _, fut in entries:
                if not fut.done():
                    fut.set_exception(APIError(503, "unavailable", "the database refused the write; nothing "
                                                                   "was accepted, try again"))
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
