"""Work that runs after other work (``after``): Slurm's ``--dependency=afterok/afterany/afternotok``.

A submission names up to ``MAX_AFTER`` workloads of the same user, each with a condition:
``ok`` (the default: it finished, exit code 0), ``any`` (it ended, however) or ``failed`` (it
ended without finishing: failed, cancelled, preempted for good, reclaimed, rejected). Until
every condition holds the workload is ``held``: not in line, no position, nothing held for it.
Each cycle, before deciding, ``release_held`` looks at held work: once all it runs after has ended
as asked it joins the line (``eligible_at``: its wait counts from then, so holding work back
earns it no age); once one of them has ended otherwise it never could, and it is cancelled,
saying which and how (Slurm's ``kill_invalid_depend``). Work after work cancelled so is
resolved in the same pass (held work is visited in submission order, and what it runs after
was submitted before it).

A dependency that already ended at submission is judged then: met, the work is pending at
once; never to be met, the submission is refused. ``w50[]`` names every task of the job array
``w50`` (its first task's id; ``arrays``), as Slurm's dependency on an array job does: it is
replaced at submission by the tasks' ids, which follow the first's. ``w50[]:corr`` (Slurm's
``aftercorr``), in an array's submission, pairs the two arrays by index: each task runs after
the task of ``w50`` with its own index finished (``pair_tasks``).
"""

from __future__ import annotations

import re

from . import arrays
from .errors import ValidationError
from .holds import hold_words
from .model import FINISHED, HELD, HOLD, PENDING, TERMINAL, Workload

MAX_AFTER = 64
MAX_CHAIN = 256    # held workloads one start estimate follows (itself, what it runs after, what that runs after, ...)
CONDITIONS = {"ok": "finishes", "any": "ends", "failed": "ends without finishing"}
ENTRY = re.compile(r"^w?(\d{1,12})(\[\])?(?::(ok|any|failed|corr))?\Z")
GONE = "gone"      # what an ended dependency whose record was purged counts as
SHOWN = 3          # dependencies a held workload's reason names; the rest are counted


def parse(value) -> list[str]:
    """The ``after`` of a submission: a list of workload ids, each optionally ``:ok``, ``:any``
    or ``:failed``; returned as ``["w0000012:ok", ...]``."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError("after must be a list of workload ids, each optionally with :ok (the default), "
                              ":any or :failed, e.g. [\"w0000012\", \"w0000013:any\"]")
    if len(value) > MAX_AFTER:
        raise ValidationError(f"after names {len(value)} workloads; at most {MAX_AFTER}")
    out: dict[str, str] = {}
    for v in value:
        m = ENTRY.match(v.strip())
        if not m:
            raise ValidationError(f"after: {v!r} is not a workload id (like w0000012, or w0000012[] for "
                                  "every task of a job array), optionally with :ok, :any or :failed")
        wid, cond = f"w{int(m.group(1)):07d}{m.group(2) or ''}", m.group(3) or "ok"
        if cond == "corr" and not m.group(2):
            raise ValidationError(f"after: {v!r}: :corr pairs the tasks of two job arrays by index; name the "
                                  f"other array as {wid}[]:corr")
        if out.get(wid, cond) != cond:
            raise ValidationError(f"after names {wid} twice, with :{out[wid]} and :{cond}")
        out[wid] = cond
    return [f"{wid}:{cond}" for wid, cond in out.items()]


def split(entry: str) -> tuple[str, str]:
    wid, _, cond = entry.partition(":")
    return wid, cond or "ok"


def met(cond: str, state: str) -> bool:
    """Whether a dependency that ended in ``state`` satisfies ``cond``."""
    if cond == "any":
        return True
    return (state == FINISHED) == (cond == "ok") and state != GONE


def _ended_words(wid: str, d: Workload | None) -> str:
    if d is None:
        return f"{wid}'s record is gone (purged with old history), so how it ended is not known"
    detail = d.reason if d.state != FINISHED else ""
    if not detail and d.exit_code not in (None, 0):
        detail = f"exit code {d.exit_code}"
    return f"{wid} {d.state}" + (f": {detail}" if detail else "")


class Dependencies:
    """Needs ``state``, ``store``, ``_unapplied``, ``_event``, ``cancel`` and ``_ended_dependencies``
    (ended work named by held work, as read from the store) of the ``Scheduler``."""

    def _dependency(self, wid: str) -> Workload | None:
        return self.state.workloads.get(wid) or self._unapplied.get(wid) or self.store.get_workload(wid)

    def initial_state(self, w: Workload) -> str:
        """At submission: PENDING if all ``w`` runs after has ended as asked, else HELD;
        refused (ValidationError) if one is not the same user's, or never can be."""
        if not w.after:
            return PENDING
        if w.kind == "notebook":
            raise ValidationError("a notebook cannot run after other work (after); submit a job instead")
        if any(split(entry)[0].endswith("[]") for entry in w.after):
            w.after = self._tasks_of_arrays(w)
        waiting = False
        for entry in w.after:
            wid, cond = split(entry)
            d = self._dependency(wid)
            if d is None or d.user != w.user:
                raise ValidationError(f"after: no workload {wid} of {w.user}'s to run after")
            if d.state not in TERMINAL:
                waiting = True
            elif not met(cond, d.state):
                raise ValidationError(f"after: {_ended_words(wid, d)}; work to run after it "
                                      f"{CONDITIONS[cond]} would never start")
        return HELD if waiting else PENDING

    def _tasks_of_arrays(self, w: Workload) -> list[str]:
        """``w.after`` with each ``wNN[]`` replaced by the ids of that array's tasks."""
        out: dict[str, str] = {}
        for entry in w.after:
            wid, cond = split(entry)
            ids = [wid]
            if wid.endswith("[]"):
                first = self._dependency(wid[:-2])
                if first is None or first.user != w.user or not first.array or first.array["id"] != first.id:
                    raise ValidationError(f"after: no job array {wid[:-2]} of {w.user}'s to run after (name an "
                                          "array by its first task's id)")
                ids = [f"w{first.seq + i:07d}" for i in range(first.array["size"])]
            for i in ids:
                if out.setdefault(i, cond) != cond:
                    raise ValidationError(f"after names {i} twice, with :{out[i]} and :{cond}")
        if len(out) > MAX_AFTER + arrays.MAX_TASKS:
            raise ValidationError(f"after names {len(out)} workloads with the tasks of its arrays; at most "
                                  f"{MAX_AFTER + arrays.MAX_TASKS}")
        return [f"{wid}:{cond}" for wid, cond in out.items()]

    def pair_tasks(self, tasks: list[Workload], corr: list[str]) -> None:
        """Each of an array's ``tasks`` runs after the task of each ``wNN[]:corr`` array with the same
        index (it finished); their states as ``initial_state`` has them. ValidationError when
        an array has no task of that index, is not the user's, or that task failed already."""
        for entry in corr:
            first_id = split(entry)[0][:-2]
            first = self._dependency(first_id)
            if first is None or first.user != tasks[0].user or not first.array or first.array["id"] != first.id:
                raise ValidationError(f"after: no job array {first_id} of {tasks[0].user}'s to pair tasks with")
            others = (self._dependency(f"w{first.seq + i:07d}") for i in range(first.array["size"]))
            by_index = {o.array["index"]: o.id for o in others if o is not None and o.array}
            for t in tasks:
                other = by_index.get(t.array["index"])
                if other is None:
                    raise ValidationError(f"after {first_id}[]:corr: array {first_id} has no task {t.array['index']}, "
                                          f"which task {t.array['index']} of this one would run after")
                t.after.append(f"{other}:ok")
        for t in tasks:
            if t.state == PENDING:
                t.state = self.initial_state(t)
            if t.state == HELD:
                t.reason = self.waits_for(t)

    def release_held(self, now: float) -> tuple[list[Workload], list[Workload]]:
        """Held work whose dependencies have all ended as asked joins the line; held work one of
        whose dependencies ended otherwise is cancelled. Call inside the cycle's transaction.
        Returns (released, cancelled)."""
        held = self.state.held
        released: list[Workload] = []
        cancelled: list[Workload] = []
        if not held:
            self._ended_dependencies.clear()
            return released, cancelled
        # Ended work never changes: what was read of it stays good for the cycles that follow
        # (held work waiting on a live job too does not read its ended ones again each cycle).
        ended = self._ended_dependencies
        for w in sorted(held.values(), key=lambda x: x.seq):
            waiting, never, how = False, "", []
            for entry in w.after:
                wid, cond = split(entry)
                live = self.state.workloads.get(wid)
                if live is not None and live.state not in TERMINAL:
                    waiting = True
                    continue
                if wid not in ended:
                    ended[wid] = live or self.store.get_workload(wid)
                d = ended[wid]
                if met(cond, d.state if d is not None else GONE):
                    how.append(f"{wid} {d.state if d is not None else 'ended'}")
                else:
                    never = f"{_ended_words(wid, d)}, and this was to run after it {CONDITIONS[cond]}"
                    break
            if never:
                ended[w.id] = self.cancel(w.id, now, reason=never)     # joins the cycle's transaction
                cancelled.append(w)
            elif not waiting and HOLD not in w.metadata:       # a hold keeps it back (holds.py)
                self.join_line(w, now)
                self._event(now, "released", w, "; ".join(how) if len(how) <= SHOWN else
                            f"all {len(how)} ended as asked ({'; '.join(how[:SHOWN])}; …)")
                released.append(w)
        named = {split(entry)[0] for w in held.values() for entry in w.after}
        for wid in [wid for wid in ended if wid not in named]:
            del ended[wid]
        return released, cancelled

    def join_line(self, w: Workload, now: float) -> None:
        """Held work joins the line, its wait counted from ``now``. Call inside a transaction."""
        self.state.held.pop(w.id, None)
        w.state, w.reason, w.eligible_at = PENDING, "", now
        self.store.put_workload(w)
        self.state.pending[w.id] = w

    def dependency_chain(self, w: Workload) -> dict[str, list[str]] | str:
        """For a start estimate of held ``w`` (estimate.py): each held workload it waits on, in
        turn, itself first, with the live workloads each still runs after; or why none is made."""
        chain: dict[str, list[str]] = {}
        todo = [w]
        while todo:
            h = todo.pop()
            if h.id in chain:
                continue
            if HOLD in h.metadata:
                how = "until its begin time" if h.metadata[HOLD].get("until") else "by hand"
                return (f"it is held {how}: no start estimate until it is released" if h is w else
                        f"{h.id}, which it waits on, is held {how}: no start estimate until it is released")
            chain[h.id] = []
            for entry in h.after:
                wid, cond = split(entry)
                d = self.state.workloads.get(wid)
                if d is None or d.state in TERMINAL:
                    continue        # ended: the next cycle judges it (met, or the work is cancelled)
                if cond == "failed":
                    return f"it runs only if {wid} ends without finishing: no start estimate"
                if d.state not in (HELD, PENDING) and d.id not in self.state.holding:
                    return f"{wid}, which it waits on, is {d.state.replace('_', ' ')}: no start estimate"
                chain[h.id].append(wid)
                if d.state == HELD:
                    todo.append(d)
            if len(chain) > MAX_CHAIN:
                return f"it waits on more than {MAX_CHAIN} held workloads in turn: no start estimate"
        return chain

    def held_lines(self) -> dict[str, list[str]]:
        """Every held workload a start estimate can follow, with the live workloads each still
        runs after: the chains of ``dependency_chain`` for all held work at once, for a plan of
        the whole line (``line_plan.py``). Work held by hand or until a begin time, work that runs
        only if another fails, work after work in no state to end, and whatever runs after any
        of them, is left out (each says why in its own estimate). Unlike one estimate's chain,
        no bound on how many follow one another: the plan simulates them all once anyway."""
        wl, holding = self.state.workloads, self.state.holding
        lines: dict[str, list[str] | None] = {}        # None: no estimate
        dependents: dict[str, list[str]] = {}          # held workload -> the held work that runs after it
        for h in self.state.held.values():
            live: list[str] | None = [] if HOLD not in h.metadata else None
            for entry in h.after if live is not None else ():
                wid, cond = split(entry)
                d = wl.get(wid)
                if d is None or d.state in TERMINAL:
                    continue
                if cond == "failed" or (d.state not in (HELD, PENDING) and wid not in holding):
                    live = None
                    break
                live.append(wid)
                if d.state == HELD:
                    dependents.setdefault(wid, []).append(h.id)
            lines[h.id] = live
        left_out = [i for i, v in lines.items() if v is None]
        while left_out:             # and whatever runs after what is left out, in turn
            for i in dependents.get(left_out.pop(), ()):
                if lines[i] is not None:
                    lines[i] = None
                    left_out.append(i)
        return {i: v for i, v in lines.items() if v is not None}

    def waits_for(self, w: Workload) -> str:
        """Why held work waits, as of now: its hold, what it still runs after, and in what state
        each is."""
        hold = w.metadata.get(HOLD)
        parts = []
        for entry in w.after:
            wid, cond = split(entry)
            d = self.state.workloads.get(wid)
            if d is not None and d.state not in TERMINAL:
                parts.append(f"{wid} {CONDITIONS[cond]} (it is {d.state.replace('_', ' ')})")
        if len(parts) > SHOWN:
            parts = parts[:SHOWN] + [f"{len(parts) - SHOWN} more"]
        after = "runs after " + " and ".join(parts) if parts else ""
        if hold:
            return hold_words(hold, w.id) + (f"; then it {after}" if after else "")
        return after or "what it runs after has ended; it joins the line in the next scheduling cycle"

