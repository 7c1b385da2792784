"""Acting on several workloads, or on job arrays, from the command line: a line for each answer,
each refusal one line on stderr, and an exit code that says whether any was the caller's mistake."""

from __future__ import annotations

import re
import sys

from .cli_client_arrays import array_id, array_line
from .client import ComputeHubError

# Control characters (C0 but tab, DEL, C1) and bidi overrides/isolates: text from the service (names,
# reasons, other users' job output) must not drive the reader's terminal.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text, keep_tabs: bool = True) -> str:
    """``text`` with control characters shown as escapes (``\x1b``), never sent to the terminal."""
    out = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
    return out if keep_tabs else out.replace("\t", "\\t")


def report(e: ComputeHubError) -> int:
    print(f"computehub: error: {printable(e.message)}", file=sys.stderr)
    mistake = e.code in ("no_token", "no_url", "wrong_url") or (e.status is not None and 400 <= e.status < 500)
    return 2 if mistake else 1


def for_each_id(ids, act, line, lines: list[str] | None = None) -> int:
    """``act(id)`` for each id, printing ``line(answer)`` (or adding it to ``lines``); a refusal is
    one line on stderr and the others still go ahead (the exit code: 2 if one was the caller's
    mistake)."""
    rc = 0
    for wid in ids:
        try:
            w = act(wid)
        except ComputeHubError as e:
            if e.status is None:         # no service: the other ids would fail the same way
                raise
            rc = max(rc, report(e))
            continue
        if lines is None:
            print(line(w))
        else:
            lines.append(line(w))
    return rc


def act_on_arrays(ch, arrays, action: str, reason: str = "", states: tuple[str, ...] | None = None,
                  until: float | None = None) -> int:
    """``action`` on each named job array in one request each (the service acts on all its tasks
    in one transaction; ``states``: only on those in one of them): a line per array; a task left
    as it was (an admin's hold) is a line on stderr, and makes the exit code 2."""
    left: list[str] = []

    def act(array: str) -> dict:
        out = ch.array_action(array, action, reason, states=states, until=until)
        left.extend(f"computehub: error: {wid} left as it was: {printable(why)}" for wid, why in out["refused"].items())
        return out

    rc = for_each_id([array_id(a) for a in arrays], act, array_line)
    for line in left:
        print(line, file=sys.stderr)
    return max(rc, 2 if left else 0)
