"""Holding waiting work back, and letting it go (Slurm's ``scontrol hold`` / ``release``).

A user holds her own pending work (it stays accepted, keeps its id, and starts only once
released); an admin holds anyone's. Held work is ``held``, as work that runs after other work
waits (``dependencies``): not in line, no position, nothing reserved for it. The hold is kept
in ``metadata.hold`` (who, when, why, whether an admin's); only an admin releases an admin's
hold. Released work joins the line with its wait counted from then (``eligible_at``): a hold
earns no place ahead of work that waited for GPUs meanwhile. Work that also runs after other
work stays held for that after its release, until the next cycle finds it ended.

A submission's ``begin`` (Slurm's ``--begin``), or ``hold(..., until=T)``, is a hold that ends by
itself: the work is held until that time (``metadata.hold.until``), and the first cycle from
then on releases it (``release_due``). Whoever could release it may do so sooner, or hold it
until another time.
"""

from __future__ import annotations

import math
import time

from . import validation
from .errors import Conflict, Forbidden, ValidationError
from .model import HELD, HOLD, PENDING, Workload

MAX_REASON = 500
MAX_BEGIN_AHEAD = 366 * 86400.0       # seconds: how far ahead a submission's begin may be
# Its user waits at the spawn page for it: a held spawn would only fail there.
NO_NOTEBOOKS = "a notebook's spawn cannot be held; stop the server (or cancel the spawn) instead"


class Holds:
    """Needs ``get``, ``state``, ``store``, ``_now``, ``_tx``, ``_event``, ``waits_for`` and
    ``join_line`` of the ``Scheduler``."""

    def hold(self, workload_id: str, now=None, actor: str = "", admin: bool = False, reason: str = "",
             until: float | None = None) -> Workload:
        """Hold ``workload_id`` (pending, or held for its dependencies): it will not start until
        released. ``admin``: an admin's hold, which only an admin may release. ``until`` (a UNIX
        time): the hold ends by itself then (``release_due``); it may replace a hold the caller could
        release (a time set or changed)."""
        reason = validation.free_text("reason", reason, MAX_REASON).strip()
        now = self._now(now)
        asked, until = until, check_until(until, now, "until")
        if asked is not None and until is None:
            raise ValidationError(f"until ({clock_time(asked)}) has passed: hold it without a time, or give a "
                                  "later one")
        w = self.get(workload_id)
        if w.state not in (PENDING, HELD):
            raise Conflict(f"workload {workload_id} is {w.state.replace('_', ' ')}; only waiting work "
                           "(pending, or held for the work it runs after) can be held")
        if w.kind == "notebook":
            raise Conflict(NO_NOTEBOOKS)
        old = w.metadata.get(HOLD)
        retimed = old and until is not None and (admin or not old.get("admin"))
        if old and (old.get("admin") or not admin) and not retimed:
            raise Conflict(f"workload {workload_id} is held already ({_by(old)})")
        with self._tx():
            self.state.pending.pop(w.id, None)
            w.metadata = {**w.metadata, HOLD: hold_record(actor, admin, now, reason, until)}
            w.state = HELD
            w.reason = self.waits_for(w)
            self.store.put_workload(w)
            self._event(now, "held", w, reason, actor=actor, admin=bool(admin),
                        **({"until": until} if until is not None else {}))
        self.state.held[w.id] = w
        return w

    def release(self, workload_id: str, now=None, actor: str = "", admin: bool = False) -> Workload:
        """Take the hold off ``workload_id``: it joins the line now (its wait counted from now),
        or stays held for the work it runs after until a cycle finds that ended."""
        w = self.get(workload_id)
        old = w.metadata.get(HOLD) if w.state == HELD else None
        if not old:
            raise Conflict(f"workload {workload_id} is not held by anyone"
                           + (" (it waits for the work it runs after)" if w.state == HELD else ""))
        if old.get("admin") and not admin:
            raise Forbidden(f"workload {workload_id} is held by an admin ({_by(old)}); only an admin releases it")
        now = self._now(now)
        with self._tx():
            w.metadata = {k: v for k, v in w.metadata.items() if k != HOLD}
            if w.after:
                w.reason = self.waits_for(w)
                self.store.put_workload(w)
            else:
                self.join_line(w, now)
            self._event(now, "hold_released", w, "", actor=actor)
        return w

    def release_due(self, now: float) -> list[Workload]:
        """Held work whose begin time has come (``metadata.hold.until``) is released: it joins the
        line, or waits on for what it runs after. Call inside the cycle's transaction."""
        due = [w for w in self.state.held.values() if (hold_until(w) or math.inf) <= now]
        for w in sorted(due, key=lambda x: x.seq):
            self.release(w.id, now, actor="", admin=True)
        return due

    def next_begin(self) -> float | None:
        """The earliest begin time of held work (``metadata.hold.until``), or None: the service wakes
        for a cycle then, so that work joins the line on time, not at the next periodic cycle."""
        return min((t for w in self.state.held.values() if (t := hold_until(w)) is not None), default=None)


def hold_record(by: str, admin: bool, at: float, reason: str, until: float | None = None) -> dict:
    """What ``metadata.hold`` keeps: who holds it, whether an admin, since when, why (and for a
    hold that ends by itself, a begin time or ``hold --until``, until when)."""
    return {"by": by, "admin": bool(admin), "at": at, "reason": reason, **({"until": until} if until else {})}


def begin_hold(spec: dict, user: str, kind: str, now: float) -> dict | None:
    """The hold a submission's ``begin`` (a UNIX time) asks for; None for none (no begin, or one
    that has come already). ValidationError says what is wrong with it."""
    begin = check_until(spec.get("begin"), now, "begin")
    if begin is None:
        return None
    if spec.get("hold"):
        raise ValidationError("hold and begin together: give one (a held workload starts once released)")
    if kind == "notebook":
        raise ValidationError("a notebook's spawn cannot wait for a begin time; start the server then instead")
    return hold_record(user, False, now, "its begin time", until=begin)


def check_until(value, now: float, what: str) -> float | None:
    """A hold's end (``begin``, ``until``): a UNIX time ahead, at most MAX_BEGIN_AHEAD; None for
    none or one already past. ValidationError says what is wrong with it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"{what} must be a time (seconds since 1970, UTC), not {value!r}")
    if value <= now:
        return None
    if value > now + MAX_BEGIN_AHEAD:
        raise ValidationError(f"{what} is {(value - now) / 86400:.0f} days ahead: at most "
                              f"{MAX_BEGIN_AHEAD / 86400:.0f}")
    return float(value)


def hold_until(w: Workload) -> float | None:
    """When ``w``'s hold ends by itself (its begin time; ``hold --until``), None if it does not."""
    return (w.metadata.get(HOLD) or {}).get("until")


def clock_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _by(hold: dict) -> str:
    who = hold.get("by") or "someone"
    why = f": {hold['reason']}" if hold.get("reason") else ""
    return f"by {'admin ' if hold.get('admin') else ''}{who}{why}"


def hold_words(hold: dict, workload_id: str) -> str:
    """What held work says of its hold."""
    how = "an admin releases it" if hold.get("admin") else f"released (computehub release {workload_id})"
    if hold.get("until"):
        return f"held until {clock_time(hold['until'])} {_by(hold)}; it joins the line then, or once {how}"
    return f"held {_by(hold)}; it starts only once {how}"
