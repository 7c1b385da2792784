"""Following a job's log from a client (``computehub logs --follow``, ``%logs --follow``): the
last lines first, then, once a second, only the lines after the byte offset the service gave
(``GET workloads/{id}/logs?after=``), so a log of any length is followed at the cost of what
is new, and no line is shown twice or skipped."""

from __future__ import annotations

import time
from typing import Callable, Collection, Optional

# fetch(params) -> the service's answer ({"lines", "offset", "more", "partial", ...}), or None
# while the job has no log yet.
Fetch = Callable[[dict], Optional[dict]]


class LogFollower:
    def __init__(self, fetch: Fetch):
        self.fetch = fetch
        self.offset = 0

    def first(self, tail: int) -> list[str]:
        """The last ``tail`` whole lines; a line still being written is shown once it is whole."""
        piece = self.fetch({"tail": tail})
        if piece is None:
            return []
        self.offset = piece["offset"]
        return piece["lines"][:-1] if piece.get("partial") else piece["lines"]

    def new(self) -> list[str]:
        """The lines written since the last read (all of them, in as many reads as they take)."""
        lines: list[str] = []
        while True:
            piece = self.fetch({"after": self.offset})
            if piece is None:
                return lines
            lines += piece["lines"]
            self.offset = piece["offset"]
            if not piece.get("more"):
                return lines


def follow(fetch: Fetch, workload_of: Callable[[], dict], *, tail: int, terminal: Collection[str],
           emit: Callable[[str], None], on_empty: Callable[[], None], poll: float = 1.0,
           sleep: Callable[[float], None] = time.sleep) -> dict:
    """Show the log's last ``tail`` lines, then each new line until the job has ended; the
    workload as it ended. Its state is read before the lines: the read after the job ended
    gets its last lines, the one without a newline included."""
    follower = LogFollower(fetch)
    first = follower.first(tail)
    for line in first:
        emit(line)
    if not first:
        on_empty()
    while True:
        w = workload_of()
        for line in follower.new():
            emit(line)
        if w["state"] in terminal:
            return w
        sleep(poll)


def ended_line(w: dict) -> str:
    """The follower's last line: ``[w42 finished]``, or with why it ended otherwise
    (``[w42 failed: could not start: ...]``: a job that never ran has no log to say it)."""
    why = (w.get("reason") or "").split("\n")[0]
    return f"[{w['id']} {w['state']}{': ' + why if why and w['state'] != 'finished' else ''}]"
