"""Durable state: the ``Store`` interface, an in-memory store and the SQL store."""

from .base import MemoryStore, Snapshot, Store

__all__ = ["MemoryStore", "Snapshot", "Store", "open_store"]


def open_store(url: str | None) -> Store:
    """A store for a database URL (``sqlite:///path`` or ``postgresql+psycopg://...``);
    ``None`` or ``"memory"`` gives a ``MemoryStore``."""
    if url in (None, "", "memory"):
        return MemoryStore()
    from .sql import SqlStore

    return SqlStore(url)
