"""pytest-jupyter's server fixtures (jp_serverapp, jp_fetch, ...) for the lab extension's tests only.

Its two autouse fixtures (an event loop per test, and server cleanup) are narrowed
to the tests that use a jupyter_server: the browser test runs Playwright's own
loop, which pytest-jupyter's teardown would try (and fail) to close.
"""

import inspect
import warnings

import pytest
from jupyter_core.utils import ensure_event_loop
from jupyter_server.serverapp import ServerApp
from pytest_jupyter.jupyter_server import *  # noqa: F401,F403


def _uses_server(request) -> bool:
    return "jp_serverapp" in request.fixturenames or inspect.iscoroutinefunction(request.function)


@pytest.fixture(autouse=True)
def jp_asyncio_loop(request):
    if not _uses_server(request):
        yield None
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*WindowsSelectorEventLoopPolicy.*", category=DeprecationWarning)
        loop = ensure_event_loop(prefer_selector_loop=True)
    yield loop
    loop.close()


@pytest.fixture(autouse=True)
def jp_server_cleanup(request, jp_asyncio_loop):
    yield
    if not _uses_server(request):
        return
    app = ServerApp.instance()
    try:
        jp_asyncio_loop.run_until_complete(app._cleanup())
    except (RuntimeError, SystemExit) as e:
        print("ignoring cleanup error", e)  # noqa: T201
    if hasattr(app, "kernel_manager"):
        app.kernel_manager.context.destroy()
    ServerApp.clear_instance()
