"""Which waiting workloads to ask the service about one by one (position, reason, ETA: only
``GET workloads/{id}`` says), for the lab panel and ``%jobs``, which show a job array's tasks
waiting in the same state as one row with the first one's reason."""

from __future__ import annotations

DETAILS_MAX = 50      # waiting workloads asked about one by one per look


def explained(workloads: list[dict], states: tuple[str, ...], limit: int = DETAILS_MAX) -> list[dict]:
    """Of the workloads in ``states``: of a job array's tasks in one state only the first, and at
    most ``limit``, those nearest the front first. A sweep of 1,000 tasks costs one request per
    look, not 1,000; the rest keep the listing's position."""
    out, rows = [], set()
    for w in sorted((w for w in workloads if w["state"] in states),
                    key=lambda w: (w.get("position") or float("inf"), w["id"])):
        a = w.get("array")
        if a:
            if (a["id"], w["state"]) in rows:
                continue
            rows.add((a["id"], w["state"]))
        out.append(w)
    return out[:limit]
