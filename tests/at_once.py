"""Run many short subprocess checks side by side (each is mostly an interpreter starting and
importing, so a 2-core machine runs two at once in the time of one)."""

from __future__ import annotations

import concurrent.futures
import os


def at_once(fn, items) -> dict:
    """``{item: fn(item)}`` with as many calls at a time as there are cores."""
    items = list(items)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(items, pool.map(fn, items)))
