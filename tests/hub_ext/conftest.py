"""Fixtures that start a real JupyterHub + proxy + ComputeHub service (see realhub.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from realhub import RealHub  # noqa: E402


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    """One hub for the session, on SQLite. Tests must not depend on each other's workloads."""
    with RealHub(tmp_path_factory.mktemp("hub")) as h:
        yield h


@pytest.fixture
def fresh_hub(tmp_path):
    """A hub of one's own (for tests that kill or reconfigure things)."""
    h = RealHub(tmp_path)
    try:
        yield h
    finally:
        h.stop()
