"""pytest-jupyter's server fixtures (jp_serverapp, jp_fetch, ...) for the lab extension's tests only."""

from pytest_jupyter.jupyter_server import *  # noqa: F401,F403
