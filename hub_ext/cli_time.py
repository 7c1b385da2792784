"""Times and durations as typed on the command line (and in the magics): ``--time 90m``,
``--since 7d``, ``--begin 22:00``; and durations as the tables show them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .cli import UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


def parse_duration(text: str, option: str) -> float:
    """Seconds from '600', '90m', '2h', '1d', '1h30m'."""
    t = text.strip().lower()
    try:
        seconds = float(t)
    except ValueError:
        parts = _DURATION.findall(t)
        if not parts or _DURATION.sub("", t).strip():
            raise UsageError(f"{option} expects seconds or a duration like 90m, 2h, 1d, 1h30m; "
                             f"not {text!r}") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise UsageError(f"{option} must be more than 0 seconds, not {text!r}")
    return seconds


def parse_when(text: str, option: str, now: float) -> float:
    """A UNIX time from a duration ago ('7d') or a date ('2025-01-31', '2025-01-31T12:00')."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        pass
    try:
        return now - parse_duration(text, option)
    except UsageError:
        raise UsageError(f"{option} expects a duration ago like 7d, 12h, 30m or a date like 2025-01-31; "
                         f"not {text!r}") from None


def parse_begin(text: str, now: float, option: str = "--begin") -> float:
    """A UNIX time for Slurm's ``--begin``: a duration from now ('2h', 'now+90m'), a time of day
    (the next '22:00'), 'midnight', 'noon', 'tomorrow', or a date ('2025-01-31T02:00'; local
    time unless it says another offset)."""
    t = text.strip().lower()
    if t == "now":
        return now
    local = datetime.fromtimestamp(now).astimezone()
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    named = {"midnight": midnight + timedelta(days=1), "tomorrow": midnight + timedelta(days=1),
             "noon": midnight + timedelta(hours=12)}
    if t in named:
        at = named[t]
        return (at + timedelta(days=1) if at.timestamp() <= now else at).timestamp()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", t):
        h, m, *sec = (int(x) for x in t.split(":"))
        if h > 23 or m > 59 or (sec and sec[0] > 59):
            raise UsageError(f"{option}: {text!r} is not a time of day")
        at = local.replace(hour=h, minute=m, second=sec[0] if sec else 0, microsecond=0)
        return (at + timedelta(days=1) if at.timestamp() <= now else at).timestamp()
    try:
        at = datetime.fromisoformat(text.strip())
        return (at if at.tzinfo else at.astimezone()).timestamp()
    except ValueError:
        pass
    try:
        return now + parse_duration(t.removeprefix("now").lstrip("+ "), option)
    except UsageError:
        raise UsageError(f"{option} expects a time: 2h or now+90m (from now), 22:00, midnight, tomorrow, or a "
                         f"date like 2025-01-31T02:00; not {text!r}") from None


def human_duration(seconds: float | None) -> str:
    """'45s', '12m', '2h5m', '3d4h'."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    steps = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    for (unit, size), (small, small_size) in zip(steps, steps[1:]):
        if s >= size:
            r = s % size // small_size
            return f"{s // size}{unit}" + (f"{r}{small}" if r else "")
    return f"{s}s"
