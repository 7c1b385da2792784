"""Reading a job's log (``<logs_dir>/<id>.log``, appended to by launchers, never rewritten) for
``GET api/v1/workloads/{id}/logs``: its last lines, or the lines after a byte offset, so a
follower asks only for what is new however long the log grows. One answer reads at most
``READ_BYTES_MAX``."""

from __future__ import annotations

import os
from dataclasses import dataclass

READ_BYTES_MAX = 4 << 20      # the most one logs request reads


@dataclass
class LogPiece:
    lines: list[str]
    offset: int         # the byte just after the last whole line read: the next read's ``after``
    size: int           # the log's length when it was read (bytes)
    partial: bool       # the last of ``lines`` is a line still being written (it lies past ``offset``)
    more: bool          # the answer was cut at READ_BYTES_MAX: there is more to read now

    def as_json(self) -> dict:
        return {"lines": self.lines, "offset": self.offset, "size": self.size, "partial": self.partial,
                "more": self.more}


def _decode(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines()


def tail_lines(path: str, n: int, max_bytes: int = READ_BYTES_MAX, block: int = 1 << 16) -> list[str]:
    """The last ``n`` lines of a file (see ``read_tail``)."""
    return read_tail(path, n, max_bytes, block).lines


def read_tail(path: str, n: int, max_bytes: int = READ_BYTES_MAX, block: int = 1 << 16) -> LogPiece:
    """The last ``n`` lines of a file, read backwards from its end a block at a time: a job's log
    of many gigabytes costs what its tail costs, not its size. At most ``max_bytes`` are read;
    the first line may then be cut, and is left out. A last line without its newline yet is
    given (``partial``), but ``offset`` stops before it, so a follower reads it again whole."""
    with open(path, "rb") as f:
        pos = end = f.seek(0, os.SEEK_END)
        blocks, newlines = [], 0
        while pos > 0 and newlines <= n and end - pos < max_bytes:
            step = min(block, pos, max_bytes - (end - pos))
            pos -= step
            f.seek(pos)
            blocks.append(f.read(step))
            newlines += blocks[-1].count(b"\n")
    data = b"".join(reversed(blocks))
    lines = _decode(data)
    # Read to the start, every line is whole; otherwise the first one may be a fragment.
    lines = lines[-n:] if pos == 0 or len(lines) > n else lines[1:]
    unfinished = len(data) - (data.rfind(b"\n") + 1)
    return LogPiece(lines, end - unfinished, end, partial=bool(unfinished) and bool(lines), more=False)


def read_after(path: str, after: int, final: bool, max_bytes: int = READ_BYTES_MAX) -> LogPiece:
    """The whole lines from byte ``after`` on (at most ``max_bytes`` of them). A line still being
    written waits for its newline, unless ``final`` (the job has ended: nothing more comes) or it
    alone fills ``max_bytes`` (then it comes in pieces). ``after`` past the end is a ValueError."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        if not 0 <= after <= end:
            raise ValueError(f"after={after} is past the end of the log ({end} bytes); "
                             "give an offset a previous answer returned")
        f.seek(after)
        data = f.read(min(max_bytes, end - after))
    more = after + len(data) < end
    cut = data.rfind(b"\n") + 1
    if (final and not more) or (cut == 0 and len(data) >= max_bytes):
        cut = len(data)
    return LogPiece(_decode(data[:cut]), after + cut, end, partial=False, more=more)
