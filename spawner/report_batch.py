"""Status reports made at the same moment travel together.

A launcher that starts and ends many jobs a second would send one request (and cost the
service one commit) per report. ``ReportBatcher.report`` has the same contract as
``ServiceClient.report`` (the workload back, or ``ServiceError``), but reports made while
one batch is on its way wait and go in the next ``POST workloads/status`` together: a
group commit on the client's side. A batch that fails as a whole (the service unreachable,
a 5xx) fails every report in it, so each caller retries as it would have before.
"""

from __future__ import annotations

import asyncio

from .service_client import ServiceClient, ServiceError

MAX_BATCH = 1000     # the service's limit per request


class ReportBatcher:
    def __init__(self, client: ServiceClient):
        self.client = client
        self._waiting: list[tuple[dict, asyncio.Future]] = []
        self._sender: asyncio.Task | None = None
        self.requests = 0        # batches sent (for tests and the launcher's log)
        self.one_by_one = False  # the service has no batch endpoint: one request per report

    @staticmethod
    def _fail(batch, e: Exception) -> None:
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(e)

    async def _one_by_one(self, batch) -> None:
        """Each report its own request (``POST workloads/{id}/status``), each caller its answer."""
        for body, fut in batch:
            body = dict(body)
            wid = body.pop("id")
            try:
                res = await self.client.report(wid, **body)
            except Exception as e:   # noqa: BLE001 - this caller's own error
                if not fut.done():
                    fut.set_exception(e)
            else:
                if not fut.done():
                    fut.set_result(res)

    async def report(self, workload_id: str, state: str, **extra) -> dict:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(({"id": workload_id, "state": state, **extra}, fut))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send())
        return await fut

    async def _send(self) -> None:
        # One turn of the loop first: reports made by tasks running now join this batch.
        await asyncio.sleep(0)
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            self.requests += 1
            try:
                if self.one_by_one:
                    await self._one_by_one(batch)
                    continue
                results = await self.client.report_many([body for body, _ in batch])
            except ServiceError as e:
                if e.status in (404, 405) and not self.one_by_one:
                    # A service without the batch endpoint (older, mid-upgrade): a 404 here is
                    # about the path, not the workloads, and must not read as "it ended".
                    self.one_by_one = True
                    self._waiting[:0] = batch
                    continue
                self._fail(batch, e)
                continue
            except Exception as e:   # noqa: BLE001 - handed to every caller of the batch
                self._fail(batch, e)
                continue
            for (_, fut), res in zip(batch, results):
                if fut.done():
                    continue      # its caller gave up (cancelled)
                if res.get("status") == 200:
                    fut.set_result(res.get("body") or {})
                else:
                    fut.set_exception(ServiceError(int(res.get("status", 500)), str(res.get("error", "error")),
                                                   str(res.get("message", ""))))
