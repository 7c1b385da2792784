"""The notebook client's error and the durations it reads (``90m``, ``2h``, ``1d``): what jobs.py
and the magics share, with nothing to import."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")


class JobError(Exception):
    """One line saying what went wrong (``status``: the HTTP status, None if no answer came)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def parse_duration(text, option: str = "time limit") -> float:
    """Seconds from 600, '600', '90m', '2h', '1d', '1h30m'."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        t = str(text).strip().lower()
        try:
            seconds = float(t)
        except ValueError:
            parts = _DURATION.findall(t)
            if not parts or _DURATION.sub("", t).strip():
                raise JobError(f"{option} expects seconds or a duration like 90m, 2h, 1d, 1h30m; not {text!r}") \
                    from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 < seconds < float("inf"):
        raise JobError(f"{option} must be more than 0 seconds, not {text!r}")
    return seconds
