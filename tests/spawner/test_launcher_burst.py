"""A burst of admitted work (a job array's tasks admitted in one cycle): the launcher's first
"running" reports go out while it still starts the rest, not after all of them. The backend
and the service are emulated (starts that hold the event loop as a local start does; a
service whose batch endpoint answers after a moment); the batcher is the real one."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from spawner.launch_base import LauncherBackend
from spawner.report_batch import ReportBatcher

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcher_alone import recording_launcher  # noqa: E402

BURST = 300


class _Blocking(LauncherBackend):
    def __init__(self, order: list):
        super().__init__()
        self.order = order

    async def start(self, workload):
        time.sleep(0.001)                   # a Popen: the event loop waits
        self.order.append(("start", workload["id"]))
        return {"message": "started"}


class _Service:
    def __init__(self, order: list):
        self.order = order

    async def report_many(self, bodies):
        self.order.append(("batch", len(bodies)))
        await asyncio.sleep(0.01)
        return [{"status": 200, "body": {"id": b["id"], "state": b["state"]}} for b in bodies]


def test_the_first_reports_of_a_burst_go_out_while_the_rest_start():
    order: list = []
    app, _ = recording_launcher(_Blocking(order))
    app.reports = ReportBatcher(_Service(order))
    del app.report                         # the real report(), through the batcher
    admitted = {f"w{i}": {"id": f"w{i}", "kind": "training", "state": "admitted",
                          "metadata": {"job": {"command": ["true"]}}} for i in range(BURST)}

    async def holding():
        return admitted

    app.holding = holding

    async def look():
        await app.reconcile()
        while app.tasks:
            await asyncio.gather(*list(app.tasks))
    asyncio.run(look())
    starts = [i for i, (kind, _) in enumerate(order) if kind == "start"]
    batches = [(i, n) for i, (kind, n) in enumerate(order) if kind == "batch"]
    assert len(starts) == BURST and sum(n for _, n in batches) == BURST
    first = batches[0][0]
    assert len([i for i in starts if i < first]) <= 100, order[:first + 1]      # not all 300 first
