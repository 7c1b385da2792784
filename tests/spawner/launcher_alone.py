"""The launcher driver alone, for tests of its own decisions: a ``LauncherApp`` with a given
backend (the processes, emulated by the test) whose reports to the service are recorded
instead of sent."""

from __future__ import annotations

from spawner.launcher_app import LauncherApp


def recording_launcher(backend) -> tuple[LauncherApp, list[tuple[str, dict]]]:
    """(the launcher, the reports it makes as (state, extra fields), in order)."""
    app = LauncherApp(computehub_url="http://127.0.0.1:9/services/computehub", token="t", config_file="")
    app.initialize([])
    app.backend = backend
    made: list[tuple[str, dict]] = []

    async def report(wid, state, **extra):
        made.append((state, extra))
        return {}

    app.report = report
    return app, made
