"""How the launcher tells that a preempted job saved when told to stop: a save newer than the
one it had before the stop. The processes are emulated (a backend that reports the folder's
newest file time) and the service is a list of the reports the launcher makes; the end-to-end
run is tests/spawner/test_launcher_preemption.py. File times come from the kernel's coarse
clock, up to a tick behind ``time.time()``: a save made at once on SIGTERM can carry a time
before the moment the launcher told the job to stop, and still counts."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from spawner.launch_base import Ended, LauncherBackend
from spawner.launcher_app import Tracked

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcher_alone import recording_launcher  # noqa: E402

TICK = 0.004        # a 250 Hz kernel's tick


class _Job(LauncherBackend):
    """``before``: its newest save before the stop (None: none); ``on_stop(told)``: the newest
    save the stop finds, given when the launcher told it to stop."""

    def __init__(self, before, on_stop):
        super().__init__()
        self.before, self.on_stop = before, on_stop

    async def last_checkpoint(self, workload):
        return self.before

    async def stop(self, workload, grace_seconds):
        return Ended(143, "stopped", checkpoint=self.on_stop(time.time()))


def _halted(job: _Job) -> list[tuple]:
    """Preempt one running workload with ``job``'s backend: the reports made, in order."""
    app, made = recording_launcher(job)
    w = {"id": "w1", "kind": "batch", "started_at": time.time() - 60}
    asyncio.run(app.halt("w1", Tracked(w, started=w["started_at"]), 1.0, report="stopped"))
    return [(state, extra.get("on_stop", False)) for state, extra in made]


def test_a_save_stamped_a_tick_before_the_stop_is_a_save_on_stop():
    # Nothing saved before; the file it writes on SIGTERM carries a time a tick early.
    assert _halted(_Job(None, lambda told: told - TICK)) == [("checkpoint", True), ("stopped", False)]
    # A periodic save a minute ago, then one on SIGTERM, stamped a tick early.
    before = time.time() - 60
    assert _halted(_Job(before, lambda told: told - TICK)) == [("checkpoint", True), ("stopped", False)]


def test_an_old_save_found_at_the_stop_is_not_a_save_on_stop():
    before = time.time() - 60
    assert _halted(_Job(before, lambda told: before)) == [("stopped", False)]
    # With no look before (a backend that cannot tell), only a save from about the stop counts.
    assert _halted(_Job(None, lambda told: told - 30)) == [("stopped", False)]
