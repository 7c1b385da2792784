"""Pod logs into the workload's log while it runs, so ``GET workloads/{id}/logs``, ``computehub logs
--follow``, ``%logs --follow`` and the lab panel show a Kubernetes job's output as it is written,
not only once it has ended.

Every ``log_interval`` seconds per running workload (and once more when it ends, and while it
stops: what its SIGTERM handler says) the launcher reads each started pod's log (the pods from
one listing shared by all workloads) with the runtime's timestamps, from a little before
the last line it shipped (``sinceSeconds`` with a margin for clocks that differ), and appends
the lines past that one: the last timestamp shipped, and how many lines carried it, say where
it stopped. A gang's or a service's lines start with their worker (``[worker 1] ``) or pod. What
was shipped per pod is kept beside the log (``<id>.log.pods``), so a restarted launcher goes on
where it stopped instead of writing lines twice; it goes once the workload is cleaned up.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import json
import math
import os
import time

from traitlets import Float, validate

from scheduler.config_checks import check_number

from .kube import LABEL_PREFIX, label_value
from .kube_manifests import JOB_INDEX_ANNOTATION
from .launch_base import LauncherBackend

SINCE_MARGIN = 120.0      # seconds read again before the last line shipped (clock skew, slow reads)
READ_TIMEOUT = 10.0


def stamp_key(ts: str) -> tuple[str, int]:
    """A log line's RFC 3339 timestamp as a sortable key (the runtime trims trailing zeros of the
    fraction: "…05.1Z" and "…05.100000000Z" are the same instant)."""
    base, _, frac = ts.rstrip("Z").partition(".")
    return base, int((frac + "000000000")[:9] or 0)


def new_lines(text: str, mark: list | None) -> tuple[list[tuple[tuple, str]], list | None]:
    """The lines of ``text`` (``timestamps=true``: each "<RFC 3339> <line>") past ``mark``
    ([timestamp, how many lines carrying it were shipped]), each with its timestamp's key, and
    the new mark."""
    out: list[tuple[tuple, str]] = []
    last = stamp_key(mark[0]) if mark else None
    shipped = mark[1] if mark else 0
    at_last = 0
    cur, cur_ts, cur_n = last, (mark[0] if mark else None), shipped
    for raw in text.splitlines():
        ts, _, line = raw.partition(" ")
        try:
            k = stamp_key(ts)
        except ValueError:             # not stamped (never from the API with timestamps): kept as it is
            out.append((cur or ("", 0), raw))
            continue
        if last is not None and k < last:
            continue
        if k == last:
            at_last += 1
            if at_last <= shipped:
                continue
        out.append((k, line))
        if k == cur:
            cur_n += 1
        else:
            cur, cur_ts, cur_n = k, ts, 1
    return out, ([cur_ts, cur_n] if cur_ts is not None else None)


class PodLogs(LauncherBackend):
    """Needs ``api``, ``namespace``, ``log_path`` and ``_log`` of the ``KubeLauncher``."""

    log_interval = Float(5.0, config=True, help="""Seconds between reads of a running workload's pod logs
        into its log (what `computehub logs --follow` and the lab panel show while it runs). Each read is
        one log request per started pod, from one listing of all their pods shared by every workload;
        0 reads at every look.""")

    def __init__(self, **kw):
        super().__init__(**kw)
        self._logs_read_at: dict[str, float] = {}      # per workload, when its pods' logs were last read
        self._log_listing: tuple[float, dict] | None = None     # (when, pods by workload): shared by all

    @validate("log_interval")
    def _log_interval_ok(self, proposal):
        return check_number(f"{type(self).__name__}.log_interval", proposal.value, low=0, unit="seconds")

    def _marks_path(self, workload: dict) -> str:
        return self.log_path(workload) + ".pods"

    def _read_marks(self, workload: dict) -> dict:
        try:
            with open(self._marks_path(workload)) as f:
                marks = json.load(f)
            return marks if isinstance(marks, dict) else {}
        except (OSError, ValueError):
            return {}

    async def ship_logs(self, workload: dict, final: bool = False) -> None:
        """Append what the workload's pods wrote since the last read (at most every
        ``log_interval`` unless ``final``). Best effort: a pod that is gone or not started yet is
        left out; when ``final`` and nothing could be read, the log says so."""
        from kubernetes_asyncio.client.exceptions import ApiException
        wid = workload["id"]
        shipped = self._logs_read_at
        now = time.monotonic()
        if not final and now - shipped.get(wid, -math.inf) < self.log_interval:
            return
        shipped[wid] = now
        api = await self.api()
        marks = self._read_marks(workload)
        before = dict(marks)
        per_pod: list[list[tuple[tuple, str]]] = []
        notes: list[str] = []
        try:
            items = sorted(await self._log_pods(api, workload, final, now),
                           key=lambda p: (str(p.metadata.creation_timestamp), p.metadata.name))
        except (ApiException, asyncio.TimeoutError) as e:
            items, notes = [], [f"pod logs not available: {_why(e)}"]
        several = len(items) > 1 or (workload.get("workers") or 1) > 1
        for p in items:
            if (p.status.phase if p.status else "Pending") == "Pending":
                continue                           # no container has started: nothing to read yet
            name, mark = p.metadata.name, marks.get(p.metadata.name)
            if not (isinstance(mark, list) and len(mark) == 2 and isinstance(mark[0], str)):
                mark = None                        # none yet (or a marks file not ours): from the start
            kw = {"timestamps": True}
            if mark:
                kw["since_seconds"] = max(1, int(time.time() - _unix(mark[0]) + SINCE_MARGIN))
            try:
                text = await asyncio.wait_for(api["core"].read_namespaced_pod_log(name, self.namespace, **kw),
                                              READ_TIMEOUT)
            except (ApiException, asyncio.TimeoutError) as e:
                notes.append(f"logs of pod {name} not available: {_why(e)}")
                continue
            fresh, marks[name] = new_lines(text or "", mark)
            who = f"[{_who(p)}] " if several else ""
            per_pod.append([(k, who + line) for k, line in fresh])
        # A gang's workers in the order their lines were written.
        lines = [line for _, line in heapq.merge(*per_pod, key=lambda kl: kl[0])]
        if lines:
            os.makedirs(self.logs_dir, exist_ok=True)
            with open(self.log_path(workload), "a") as f:
                f.write("".join(line + "\n" for line in lines))
        for note in notes if final else ():
            self._log(workload, note)
        if marks != before:                         # where it stopped, for a launcher started after this one
            os.makedirs(self.logs_dir, exist_ok=True)
            tmp = self._marks_path(workload) + ".tmp"
            with open(tmp, "w") as f:
                json.dump(marks, f)
            os.replace(tmp, self._marks_path(workload))

    async def _log_pods(self, api, workload: dict, final: bool, now: float) -> list:
        """The workload's pods: read for it alone when it ends; else from one listing of every
        workload's pods, taken at most every ``log_interval`` and shared by all of them."""
        if final:
            selector = f"{LABEL_PREFIX}workload={label_value(workload['id'])}"
            return (await api["core"].list_namespaced_pod(self.namespace, label_selector=selector)).items
        listing = self._log_listing
        if listing is None or now - listing[0] >= self.log_interval:
            pods = await api["core"].list_namespaced_pod(self.namespace, label_selector=f"{LABEL_PREFIX}workload")
            by: dict[str, list] = {}
            for p in pods.items:
                by.setdefault((p.metadata.labels or {}).get(f"{LABEL_PREFIX}workload"), []).append(p)
            listing = self._log_listing = (now, by)
        return listing[1].get(label_value(workload["id"]), [])

    def forget_logs(self, workload: dict) -> None:
        """The workload is cleaned up: its read marks go."""
        self._logs_read_at.pop(workload["id"], None)
        try:
            os.unlink(self._marks_path(workload))
        except OSError:
            pass


def _who(pod) -> str:
    index = (pod.metadata.annotations or {}).get(JOB_INDEX_ANNOTATION)
    return f"worker {index}" if index is not None else pod.metadata.name


def _why(e: BaseException) -> str:
    return f"{getattr(e, 'status', '')} {getattr(e, 'reason', '') or type(e).__name__}".strip()


def _unix(ts: str) -> float:
    base, nanos = stamp_key(ts)
    t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + nanos / 1e9
