"""GPU-hours and cost over a window, as each caller may see them: ``GET api/v1/usage`` (the API),
``usage`` (a page: a window, a grouping, a table with totals and shares) and ``usage.csv`` (the
same rows for a spreadsheet). Users see their own, team leads their teams' queues, admins and
launchers everyone's; the numbers come from the ledger (``scheduler.ledger``)."""

from __future__ import annotations

import csv
import io
import time

from tornado import web

from scheduler import ledger
from scheduler.ledger import GROUPS, OWNED

from .base import APIError, BaseHandler
from .pages import PageHandler

WINDOWS = (1, 7, 30, 90)      # days the page offers
BY_WORDS = {"user": "user", "queue": "queue", "flavor": "GPU model", "workload": "workload", "array": "job array"}


def visible_usage(caller, sched, start: float, end: float, by: str) -> list[dict]:
    """``ledger.usage`` rows of what ``caller`` may see in [start, end)."""
    allocs = sched.store.get_allocations(start, end)
    if not (caller.all_teams or caller.on_behalf):
        access = sched.state.tree.access
        allocs = [a for a in allocs if (a.user == caller.name and caller.kind == "user")
                  or caller.leads(access.get(a.queue, ()))]
    return ledger.usage(allocs, start, end, by, sched.prices)


def hours(h: float) -> str:
    """GPU-hours as the page shows them: two decimals, and a few seconds not shown as nothing."""
    return "< 0.01" if 0 < h < 0.005 else f"{h:,.2f}"


def cell(text: str) -> str:
    """A name as a CSV cell a spreadsheet will not run: one that starts like a formula (a user
    may be named "=HYPERLINK(...)") gets a leading apostrophe, as OWASP advises."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def whose(caller) -> str:
    if caller.all_teams or caller.on_behalf:
        return "everyone's"
    if caller.team_groups:
        return f"your own and your teams' ({', '.join(sorted(caller.team_groups))})"
    return "your own"


class UsageHandler(BaseHandler):
    """``GET api/v1/usage?start=&end=&by=``: users see their own, team leads their teams', admins all."""

    async def get(self):
        caller = self.caller
        self.require(caller.sees_anything, "see usage")
        end = self.query_float("end", time.time())
        start = self.query_float("start", end - 7 * 86400)
        if start >= end:
            raise APIError(400, "invalid", "start must be before end")
        by = self.get_query_argument("by", "user")
        if by not in GROUPS:
            raise APIError(400, "invalid", f"by must be one of {', '.join(GROUPS)}")
        self.write_json({"start": start, "end": end, "by": by,
                         "rows": visible_usage(caller, self.service.sched, start, end, by)})


class _UsageView(PageHandler):
    def report(self) -> dict:
        """The window and grouping asked for (checked: a 400 page says what is allowed) and its rows."""
        caller = self.caller
        self.require(caller.sees_anything, "see usage")
        days = self.get_query_argument("days", "7")
        if days not in {str(d) for d in WINDOWS}:
            raise APIError(400, "invalid", f"days must be one of {', '.join(map(str, WINDOWS))}, not {days!r}")
        by = self.get_query_argument("by", "user")
        if by not in GROUPS:
            raise APIError(400, "invalid", f"by must be one of {', '.join(GROUPS)}, not {by!r}")
        end = time.time()
        start = end - int(days) * 86400
        rows = visible_usage(caller, self.service.sched, start, end, by)
        total = sum(r["gpu_seconds"] for r in rows)
        for r in rows:
            r["share"] = r["gpu_seconds"] / total if total else 0.0
        return {"days": int(days), "by": by, "owned": by in OWNED, "start": start, "end": end, "rows": rows,
                "total_seconds": total,
                "total_cost": round(sum(r["cost"] for r in rows), 6)}


class UsagePage(_UsageView):
    active = "usage"

    @web.authenticated
    async def get(self):
        self.render("usage.html", me=self.caller, windows=WINDOWS, groups=BY_WORDS, whose=whose(self.caller), hours=hours,
                    priced=bool(self.service.sched.prices), **self.report())


class UsageCSV(_UsageView):
    @web.authenticated
    async def get(self):
        r = self.report()
        who = ["user", "queue"] if r["by"] in OWNED else []
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow([r["by"], *who, "gpu_hours", "cost", "share"])
        for row in r["rows"]:
            w.writerow([cell(row[r["by"]]), *(cell(row.get(k, "")) for k in who), f"{row['gpu_hours']:.6f}",
                        f"{row['cost']:.6f}", f"{row['share']:.6f}"])
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", f'attachment; filename="computehub-usage-{r["days"]}d-by-{r["by"]}.csv"')
        self.finish(out.getvalue())
