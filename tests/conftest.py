"""Shared fixtures: a real PostgreSQL server and store URLs for both databases.

``store_url`` runs a test once on SQLite (a file in ``tmp_path``) and once on
PostgreSQL (a fresh database on the session's server). Tests that use the
PostgreSQL fixtures are marked ``postgres`` automatically.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pg import MISSING, PgServer, find_bindir  # noqa: E402

PG_FIXTURES = {"pg_url", "pg_server", "pg_db_url", "own_pg"}


def pytest_collection_modifyitems(items):
    for item in items:
        if PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


def _running_pg():
    """A started PostgreSQL server (stopped when the generator closes); fails loudly without one."""
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(MISSING, pytrace=False)
    server = PgServer(bindir)
    try:
        try:
            server.start()
        except Exception as e:
            pytest.fail(f"could not start PostgreSQL: {e}", pytrace=False)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server():
    yield from _running_pg()


@pytest.fixture
def own_pg():
    """A PostgreSQL server of the test's own, which it may stop and start again (``halt``,
    ``resume``) without disturbing the session's."""
    yield from _running_pg()


@pytest.fixture(scope="session")
def pg_url(pg_server) -> str:
    """URL of the session's PostgreSQL server (its ``postgres`` database)."""
    return pg_server.url


@pytest.fixture
def pg_db_url(pg_server) -> str:
    """URL of a fresh, empty database on the session's PostgreSQL server."""
    return pg_server.create_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("pg_db_url")


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    """The distribution's Chromium driven by playwright (never a downloaded browser build).
    Missing Chromium or playwright is a loud failure: `make test` installs both."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install chromium)")
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
