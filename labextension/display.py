"""The live display ``%submit`` and ``%serve`` show: a job's state in words (``describe``), as
text and HTML (``bundle``), kept up to date by a background thread (``Follower``) while the
kernel stays free: queued (position, ETA, reason) → running (node, GPUs, its last output
lines) → finished (exit code, duration, GPU-hours) or failed (the last log lines)."""

from __future__ import annotations

import collections
import html
import threading
import time

from IPython.display import update_display

from hub_ext.log_follow import LogFollower
from spawner.wording import eta_text

from . import jobs as J

POLL = 1.0             # seconds between looks at a job the display follows
TAIL_SHOWN = 5         # the job's last output lines the display shows while it runs


def duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def describe(w: dict, lines: list[str] | None = None) -> tuple[str, str]:
    """(headline, detail) of a workload's state, as the live display shows it. ``lines``: its
    output's last lines (shown while it runs, once it finished, and why it failed)."""
    state, wid = w["state"], w["id"]
    name = f"{wid} ({w['name']})" if w.get("name") else wid
    ex = w.get("explanation") or {}
    status = (w.get("metadata") or {}).get("status") or {}
    if state == "pending":
        pos = ex.get("position_in_queue", w.get("position_in_queue"))
        where = f"position {pos} in {w['queue']}" if pos else f"in {w['queue']}"
        eta = eta_text(ex.get("eta_seconds"), ex.get("eta_earliest", False))
        return f"{name}: queued, {where}, {eta}", ex.get("reason") or w.get("reason") or ""
    if state == "awaiting_approval":
        return f"{name}: waiting for an admin's approval in {w['queue']}", w.get("reason") or ""
    if state == "held":
        eta = f", {eta_text(ex['eta_seconds'], ex.get('eta_earliest', False))}" \
            if ex.get("eta_seconds") is not None else ""        # it runs after other work: from when that ends
        return f"{name}: held in {w['queue']}{eta}", ex.get("reason") or w.get("reason") or ""
    where = "; ".join(f"{a['node']} GPU {','.join(map(str, a['gpus'])) or '-'}" for a in w.get("placement") or [])
    if state == "admitted":
        return f"{name}: starting on {where or 'a node'}", ""
    if state == "running":
        extra = " — ready" if status.get("ready") else ""
        saved, started = w.get("checkpointed_at"), w.get("started_at")
        if saved and started and saved >= started:      # its launcher saw a save of this run
            extra += f" — checkpoint saved {duration(max(0.0, time.time() - saved))} ago"
        if w.get("saves_on_stop"):      # seen saving when preempted: preempting it loses only a restart
            extra += " — saves when stopped"
        said = "\n".join(x for x in (status.get("message"), "\n".join(lines or ())) if x)
        return f"{name}: running on {where or status.get('node') or 'a node'}{extra}", said
    if state == "preempting":
        return f"{name}: being preempted (it gets SIGTERM and a grace period to checkpoint)", w.get("reason") or ""
    if state == "cancelling":
        return f"{name}: being cancelled (it gets SIGTERM and a grace period; its GPUs return once it has stopped)", ""
    took = (w["ended_at"] - w["started_at"]) if w.get("ended_at") and w.get("started_at") else None
    gpus = ((w.get("resources") or {}).get("gpu") or 0) * (w.get("workers") or 1)
    stats = f", ran {duration(took)}, {gpus * took / 3600:.3f} GPU-hours" if took is not None else ""
    if state == "finished":
        return f"{name}: finished, exit code {w.get('exit_code', 0)}{stats}", "\n".join(lines or ())
    if state == "failed":
        detail = "\n".join(lines) if lines else (w.get("reason") or "")
        return f"{name}: failed, exit code {w.get('exit_code')}{stats}", detail
    return f"{name}: {state}{stats}", w.get("reason") or ""


def bundle(head: str, detail: str) -> dict:
    text = head + ("\n" + detail if detail else "")
    body = f"<b>{html.escape(head)}</b>"
    if detail:
        body += f"<pre style='margin:2px 0'>{html.escape(detail)}</pre>"
    return {"text/plain": text, "text/html": f"<div class='computehub-job'>{body}</div>"}


class _Watcher(threading.Thread):
    """What the displays share: a look every ``every`` seconds until ``stopped``; after
    ``GIVE_UP`` failed looks in a row the display says so, and the watcher stops."""

    GIVE_UP = 30

    def __init__(self, what: str, display_id: str, every: float):
        super().__init__(daemon=True, name=f"computehub-{what}")
        self.what, self.display_id, self.every = what, display_id, every
        self.stopped = threading.Event()
        self._errors = 0

    def look(self, fetch):
        """``fetch()``, or None when it failed (then wait a turn, or give up)."""
        try:
            out = fetch()
            self._errors = 0
            return out
        except J.JobError as e:
            self._errors += 1
            if self._errors >= self.GIVE_UP:
                update_display(bundle(f"{self.what}: lost track of it: {e}", ""), raw=True,
                               display_id=self.display_id)
                self.stopped.set()
            else:
                self.stopped.wait(self.every)
            return None


class Follower(_Watcher):
    """Keeps one job's display up to date without blocking the kernel."""

    def __init__(self, job: J.Job, display_id: str, every: float = POLL):
        super().__init__(job.id, display_id, every)
        self.job = job
        self.states: list[str] = []

    def run(self):
        last = None
        # The output's last lines while it runs, read by offset: a long log costs only what is new.
        output = LogFollower(lambda params: self.job.client.log_piece(self.job.id, params))
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_SHOWN)
        reading = False
        while not self.stopped.is_set():
            w = self.look(self.job.status)
            if w is None:
                continue
            if w["state"] == "failed":
                lines = self.job.logs(20)
            else:
                if w["state"] in ("running", "finished"):
                    try:
                        tail.extend(output.new() if reading else output.first(TAIL_SHOWN))
                        reading = True
                    except J.JobError:
                        pass                        # the state still shows; the lines come at the next look
                lines = list(tail)
            shown = describe(w, lines)
            if shown != last:
                update_display(bundle(*shown), raw=True, display_id=self.display_id)
                last = shown
                self.states.append(w["state"])
            if w["state"] in J.TERMINAL:
                return
            self.stopped.wait(self.every)


def describe_array(first: dict, tasks: list[dict]) -> tuple[str, str]:
    """(headline, detail) of a job array: how many tasks are in each state, and the tasks that
    failed (their reason) — the live display of ``%submit --array``."""
    a = first.get("array") or {}
    counts: dict[str, int] = {}
    for w in tasks:
        counts[w["state"]] = counts.get(w["state"], 0) + 1
    name = f"array {first['id']} ({first['name']})" if first.get("name") else f"array {first['id']}"
    cap = f", at most {a['limit']} at a time" if a.get("limit") else ""
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    failed = [f"{w['id']} [{w['array']['index']}] failed: {w.get('reason') or 'exit code ' + str(w.get('exit_code'))}"
              for w in tasks if w["state"] == "failed"]
    return f"{name}: {len(tasks)} tasks{cap} — {states}", "\n".join(failed[:10])


class ArrayFollower(_Watcher):
    """Keeps a job array's display (``describe_array``) up to date until every task has ended."""

    def __init__(self, array, display_id: str, every: float = POLL):
        super().__init__(f"array {array.id}", display_id, every)
        self.array = array
        self.shown: list[tuple[str, str]] = []

    def run(self):
        while not self.stopped.is_set():
            tasks = self.look(self.array.tasks)
            if tasks is None:
                continue
            shown = describe_array(self.array.last, tasks)
            if not self.shown or shown != self.shown[-1]:
                update_display(bundle(*shown), raw=True, display_id=self.display_id)
                self.shown.append(shown)
            if tasks and all(w["state"] in J.TERMINAL for w in tasks):
                return
            self.stopped.wait(self.every)
