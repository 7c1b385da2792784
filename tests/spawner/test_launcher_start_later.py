"""A backend's start put off (``StartLater``: what an earlier run left is still going away):
the launcher reports nothing, forgets the workload so that its next look starts it again,
and then starts it. The backend and the service are emulated (a list of the reports made);
the Kubernetes case end to end is in tests/spawner/test_launch_kube.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from spawner.launch_base import LauncherBackend, StartLater
from spawner.launcher_app import Tracked

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcher_alone import recording_launcher  # noqa: E402


class _SlowToClear(LauncherBackend):
    def __init__(self):
        super().__init__()
        self.tries = 0

    async def start(self, workload):
        self.tries += 1
        if self.tries == 1:
            raise StartLater("an earlier run's Job ch-w1 is still being deleted")
        return {"message": "started"}


def test_a_start_put_off_is_tried_again_and_never_reported_failed():
    app, made = recording_launcher(_SlowToClear())
    w = {"id": "w1", "kind": "training", "state": "admitted"}

    async def looks():
        app.tracked["w1"] = Tracked(w, busy=True)        # as a look does before it launches
        await app.launch(w)
        assert "w1" not in app.tracked and made == []      # put off: the next look starts it
        app.tracked["w1"] = Tracked(w, busy=True)
        await app.launch(w)

    asyncio.run(looks())
    assert app.backend.tries == 2 and [state for state, _ in made] == ["running"]
    assert app.tracked["w1"].busy is False


class _Quick(LauncherBackend):
    async def start(self, workload):
        return {"message": "started"}

    async def poll(self, workload):
        return None


def test_a_view_of_the_service_older_than_a_start_does_not_report_it_twice():
    """A look takes its view of the service (``holding``), then works through it with awaits in
    between; a start that ends meanwhile has reported "running" itself, so the view's "admitted"
    is stale, not a lost report (under load this sent "running" twice). A view taken after the
    start, still "admitted", is a lost report: said again."""
    app, made = recording_launcher(_Quick())
    w = {"id": "w1", "kind": "training", "state": "admitted"}

    async def looks():
        async def view_while_it_starts():
            snapshot = {"w1": dict(w)}              # the service's view, taken first
            app.tracked["w1"] = Tracked(w, busy=True)
            await app.launch(w)                     # ...the start ends (and reports) meanwhile
            return snapshot
        app.holding = view_while_it_starts
        await app.reconcile()
        assert [s for s, _ in made] == ["running"], made

        async def view_after():
            return {"w1": dict(w)}                  # still admitted: that report was lost
        app.holding = view_after
        await app.reconcile()

    asyncio.run(looks())
    assert [s for s, _ in made] == ["running", "running"], made
