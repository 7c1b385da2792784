"""Alembic environment of the store, run programmatically by ``SqlStore``.

The caller passes an open connection (inside its transaction) through
``config.attributes["connection"]``; without one, ``sqlalchemy.url`` of the
config is used.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from scheduler.store.tables import metadata

config = context.config


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        try:
            with engine.begin() as conn:
                _run(conn)
        finally:
            engine.dispose()
