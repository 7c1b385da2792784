"""Holding waiting work back, and letting it go (Slurm's ``scontrol hold`` / ``release``).

A user holds her own pending work (it stays accepted, keeps its id, and starts only once
released); an admin holds anyone's. Held work is ``held``, as work that runs after other work
waits (``dependencies``): not in line, no position, nothing reserved for it. The hold is kept
in ``metadata.hold`` (who, when, why, whether an admin's); only an admin releases an admin's
hold. Released work joins the line with its wait counted from then (``eligible_at``): a hold
earns no place ahead of work that waited for GPUs meanwhile. Work that also runs after other
work stays held for that after its release, until the next cycle finds it ended.
"""

from __future__ import annotations

from . import validation
from .errors import Conflict, Forbidden
from .model import HELD, HOLD, PENDING, Workload

MAX_REASON = 500
# Its user waits at the spawn page for it: a held spawn would only fail there.
NO_NOTEBOOKS = "a notebook's spawn cannot be held; stop the server (or cancel the spawn) instead"


class Holds:
    """Needs ``get``, ``state``, ``store``, ``_now``, ``_tx``, ``_event``, ``waits_for`` and
    ``join_line`` of the ``Scheduler``."""

    def hold(self, workload_id: str, now=None, actor: str = "", admin: bool = False, reason: str = "") -> Workload:
        """Hold ``workload_id`` (pending, or held for its dependencies): it will not start until
        released. ``admin``: an admin's hold, which only an admin may release."""
        reason = validation.free_text("reason", reason, MAX_REASON).strip()
        w = self.get(workload_id)
        if w.state not in (PENDING, HELD):
            raise Conflict(f"workload {workload_id} is {w.state.replace('_', ' ')}; only waiting work "
                           "(pending, or held for the work it runs after) can be held")
        if w.kind == "notebook":
            raise Conflict(NO_NOTEBOOKS)
        old = w.metadata.get(HOLD)
        if old and (old.get("admin") or not admin):
            raise Conflict(f"workload {workload_id} is held already ({_by(old)})")
        now = self._now(now)
        with self._tx():
            self.state.pending.pop(w.id, None)
            w.metadata = {**w.metadata, HOLD: hold_record(actor, admin, now, reason)}
            w.state = HELD
            w.reason = self.waits_for(w)
            self.store.put_workload(w)
            self._event(now, "held", w, reason, actor=actor, admin=bool(admin))
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


def hold_record(by: str, admin: bool, at: float, reason: str) -> dict:
    """What ``metadata.hold`` keeps: who holds it, whether an admin, since when, why."""
    return {"by": by, "admin": bool(admin), "at": at, "reason": reason}


def _by(hold: dict) -> str:
    who = hold.get("by") or "someone"
    why = f": {hold['reason']}" if hold.get("reason") else ""
    return f"by {'admin ' if hold.get('admin') else ''}{who}{why}"


def hold_words(hold: dict, workload_id: str) -> str:
    """What held work says of its hold."""
    how = "an admin releases it" if hold.get("admin") else f"released (computehub release {workload_id})"
    return f"held {_by(hold)}; it starts only once {how}"
