"""The notebook client's error and what it reads and writes as text: durations (``90m``, ``2h``,
``1d``), begin times, job arrays' indexes, a script's command line. What jobs.py and the magics
share, with nothing to import."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime

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


def begin_time(value) -> float:
    """A submission's ``begin`` (not before then) as the service takes it, a UNIX time, from a
    UNIX time, a ``datetime`` (local time if it names no zone), or a duration from now (``"2h"``)."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.astimezone()).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return time.time() + parse_duration(value, "begin")
    raise JobError(f"begin takes a UNIX time, a datetime or a duration from now like '2h', not {value!r}")


def array_text(array) -> str:
    """An array's indexes as the service takes them: text as it is; a range or a list of whole
    numbers as Slurm writes them (``range(0, 10, 2)`` → ``0-8:2``)."""
    if isinstance(array, str):
        return array
    if isinstance(array, range) and len(array) and array.step > 0:
        return f"{array.start}-{array[-1]}:{array.step}" if len(array) > 1 else str(array.start)
    if isinstance(array, (list, tuple)) and array and all(isinstance(i, int) and not isinstance(i, bool)
                                                          for i in array):
        return ",".join(map(str, array))
    raise JobError(f"array takes indexes like '0-9' or '0-99%10' (at most 10 at a time), a range or a list "
                   f"of whole numbers, not {array!r}")


def script_command(script: str, args=()) -> list[str]:
    """How a script runs: Python files with this kernel's interpreter, anything else as a program."""
    if script.endswith(".py"):
        return [sys.executable, "-u", script, *args]
    return [script if "/" in script else "./" + script, *args]
