"""How the launcher handles a workload's end: a crashed inference service restarted (here, or
counted when its platform restarted it in place) up to ``max_restarts``; otherwise the end
reported to the service (finished, failed, node lost: requeued by its class) with its last log
lines, and what is left of it cleaned up."""

from __future__ import annotations

from dataclasses import dataclass

from .launch_base import Ended

REASON_MAX = 2000


@dataclass
class Tracked:
    workload: dict
    restarts: int = 0
    ready: bool = False
    busy: bool = False        # a stop (cancel, preemption, time limit) is under way
    started: float = 0.0
    ended: Ended | None = None  # how it ended, kept until the service has heard it
    checkpoint: float = 0.0     # the last checkpoint reported to the service (UNIX time)


def ended_reason(ended: Ended) -> str:
    """The reason a failed workload shows: what happened, then its last log lines (≤ 2000 chars)."""
    if not ended.last_lines or ended.exit_code == 0:
        return ended.reason[:REASON_MAX]
    head = ended.reason + "; last lines:\n"
    tail = "\n".join(ended.last_lines)
    room = REASON_MAX - len(head)
    return head + (tail[-room:] if room > 0 else "")


class Endings:
    """The part of ``LauncherApp`` that handles ends. Needs ``backend``, ``report``, ``tracked``,
    ``max_restarts`` and ``log``."""

    async def _report_ended(self, wid: str, t: Tracked, ended: Ended) -> None:
        try:
            await self.on_ended(wid, t, ended)
        finally:
            t.busy = False              # still tracked only when an inference service was restarted

    async def on_ended(self, wid: str, t: Tracked, ended: Ended) -> None:
        w = t.workload
        if ended.restarted and t.ended is None:
            # The platform restarted it in place (Kubernetes, CrashLoopBackOff): counted, not restarted here.
            t.restarts += ended.restarted
            if t.restarts <= self.max_restarts:
                t.ready = False
                self.log.warning("%s: crashed (%s); restarted in place, %d of %d", wid, ended.reason,
                                 t.restarts, self.max_restarts)
                await self.report(wid, "update", restarts=t.restarts, ready=False,
                                  message=f"restarted after: {ended.reason} ({t.restarts}/{self.max_restarts})"
                                  [:REASON_MAX])
                return
            ended = Ended(ended.exit_code or 1, f"{ended.reason}; it crashed {t.restarts} times, more than "
                          f"max_restarts ({self.max_restarts})", ended.last_lines)
        elif w["kind"] == "inference" and not ended.node_lost and not ended.final \
                and t.restarts < self.max_restarts and t.ended is None:
            t.restarts += 1
            t.ready = False
            self.log.warning("%s: inference crashed (%s); restart %d of %d", wid, ended.reason, t.restarts,
                             self.max_restarts)
            try:
                notes = await self.backend.restart(w)
            except Exception as e:              # could not even restart: that is the end
                ended = Ended(ended.exit_code or 1, f"{ended.reason}; restart failed: {e}", ended.last_lines)
            else:
                await self.report(wid, "update", restarts=t.restarts, ready=False,
                                  message=f"restarted after: {ended.reason} ({t.restarts}/{self.max_restarts})"
                                  + (f"; {notes['message']}" if notes.get("message") else ""))
                return
        elif w["kind"] == "inference" and not ended.node_lost and not ended.final and t.ended is None \
                and ended.exit_code != 0:
            n = t.restarts + 1      # restarted here as often as allowed: this crash is one too many
            ended = Ended(ended.exit_code, f"{ended.reason}; it crashed {n} time{'s' if n != 1 else ''}, more than "
                          f"max_restarts ({self.max_restarts})", ended.last_lines)
        reason = ended_reason(ended)
        if ended.node_lost:
            reason = f"node lost: {reason}"[:REASON_MAX]
        state = "finished" if ended.exit_code == 0 and not ended.node_lost else "failed"
        self.log.info("%s: %s (%s)", wid, state, ended.reason)
        extra = {"node_lost": True} if ended.node_lost else {}    # the service requeues it by class
        t.ended = ended
        await self.report(wid, state, exit_code=(ended.exit_code or 1) if ended.node_lost else ended.exit_code,
                          reason=reason, **extra)
        try:        # before it is untracked: a requeued workload must not start on what is left
            await self.backend.cleanup(w)
        except Exception as e:      # what is left only lingers; the end is reported
            self.log.warning("%s: could not remove what is left of it: %s", wid, e)
        # only now: a report that did not reach the service is made again at the next look
        self.tracked.pop(wid, None)
