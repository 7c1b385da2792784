"""How the command line and the magics read a time (hub_ext/cli_time.py: ``--begin``, ``--until``),
in a fixed time zone and at a fixed moment."""

import time
from datetime import datetime, timezone

import pytest

from hub_ext.cli import UsageError
from hub_ext.cli_time import parse_begin

NOW = datetime(2026, 12, 7, 20, 0, 30, tzinfo=timezone.utc).timestamp()


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def at(*fields) -> float:
    return datetime(*fields, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("text, when", [
    ("now", NOW),
    ("2h", NOW + 7200),
    ("now+90m", NOW + 5400),
    ("+30m", NOW + 1800),
    ("22:00", at(2026, 12, 7, 22, 0)),                  # later today
    ("20:00", at(2026, 12, 8, 20, 0)),                  # passed a moment ago: tomorrow's
    ("07:15:30", at(2026, 12, 8, 7, 15, 30)),
    ("midnight", at(2026, 12, 8)),
    ("tomorrow", at(2026, 12, 8)),
    ("noon", at(2026, 12, 8, 12, 0)),                   # today's has passed
    ("2026-12-09T02:00", at(2026, 12, 9, 2, 0)),        # local time: UTC here
    ("2026-12-09T02:00+01:00", at(2026, 12, 9, 1, 0)),  # its own offset
])
def test_times_a_person_types(text, when):
    assert parse_begin(text, NOW) == when


@pytest.mark.parametrize("text, says", [
    ("25:00", "--begin: '25:00' is not a time of day"),
    ("12:61", "--begin: '12:61' is not a time of day"),
    ("soon", "--begin expects a time: 2h or now+90m (from now), 22:00, midnight, tomorrow, or a date"),
    ("", "--begin expects a time"),
])
def test_what_is_not_a_time_is_refused_saying_so(text, says):
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        parse_begin(text, NOW)
