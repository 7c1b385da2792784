"""HTML pages served by the service: a landing page for everyone and the admin pages.

The pages are rendered on the server (tornado templates in ``templates/``); a
small script (``static/computehub.js``) makes the edits by calling the REST API
with ``fetch`` and the XSRF token, and shows the API's error messages on the page.

Browsers authenticate with the hub's OAuth cookie: a visitor who is not logged in
is redirected through the hub's login and back. The admin pages need the
``custom:computehub:admin`` scope; anyone else gets a 403 page, never the data.
"""

from __future__ import annotations

import json
import time

from jupyterhub.services.auth import HubOAuthenticated
from tornado import web
from tornado.escape import to_unicode, xhtml_escape
from tornado.log import app_log

from scheduler import SchedulerError, StoreUnavailable
from scheduler.holds import hold_until
from scheduler.model import HELD, PENDING, TERMINAL
from scheduler.resources import CPU, GPU, MEMORY, fmt_amount, is_flavor, label

from . import views
from .api_admin import counts
from .base import APIError, BaseHandler
from .cli_client_arrays import collapse, compact
from .scopes import ADMIN, Caller
from .snapshot import EXPLAIN_MAX, brief

NEED_ADMIN = f"ComputeHub admin pages need the {ADMIN} scope"
AUDIT_ROWS = 200
RECENT_ENDED = 5      # ended workloads on the landing page
NAV = [("admin/", "Queues"), ("admin/nodes", "Nodes"), ("admin/pending", "Pending"),
       ("admin/approvals", "Approvals"), ("usage", "Usage"), ("admin/audit", "Audit log")]


def page_handlers(prefix: str) -> list:
    from .usage import UsageCSV, UsagePage      # (usage.py builds on PageHandler, below)
    a = prefix + "/admin"
    return [
        (prefix + r"/?", LandingPage),
        (prefix + r"/usage", UsagePage),
        (prefix + r"/usage\.csv", UsageCSV),
        (a, web.RedirectHandler, {"url": a + "/"}),
        (a + r"/", QueuesPage),
        (a + r"/nodes", NodesPage),
        (a + r"/pending", PendingPage),
        (a + r"/approvals", ApprovalsPage),
        (a + r"/audit", AuditPage),
    ]


# --- formatting helpers (also used by the templates) ---------------------------------


def fmt_time(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def iso_time(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "unknown"
    s = int(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def fmt_eta(w: dict) -> str:
    """A pending workload's start estimate: "in about 12 min", "in 2 h 0 min or later" (a lower
    bound: it would start on borrowed GPUs), "unknown"; "" for work that is not pending."""
    if w.get("eta_seconds") is not None:
        d = fmt_duration(w["eta_seconds"])
        return f"in {d} or later" if w.get("eta_earliest") else f"in about {d}"
    return "unknown" if w.get("state") == "pending" else ""


def fmt_vector(vec: dict | None) -> str:
    """{'gpu': 2, 'cpu': 4000} -> '2 GPUs, 4 cores CPU' (ints as stored, or rendered strings)."""
    if not vec:
        return "none"
    parts = []
    for k, v in vec.items():
        if k == CPU and isinstance(v, str) and v.endswith("m"):
            v = int(v[:-1])
        parts.append(f"{fmt_amount(k, v) if isinstance(v, int) else v} {label(k)}")
    return ", ".join(parts)


def fmt_cores(millicores) -> str:
    """'32000m' or 32000 -> '32'; '1500m' -> '1.5'."""
    m = int(str(millicores).rstrip("m") or 0)
    return f"{m / 1000:g}"


def _short(v) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True) if v else "none"
    return str(v)


def change_summary(data: dict) -> str:
    """'guaranteed.gpu: 4 → 3; weight: 1.0 → 2.0' for events with before/after."""
    if "before" not in data and "after" not in data:
        rest = {k: v for k, v in data.items() if k not in ("actor",)}
        text = ", ".join(f"{k}={_short(v)}" for k, v in rest.items())
        return text if len(text) <= 160 else text[:157] + "…"
    before, after = data.get("before"), data.get("after")
    what = next((f"{k.replace('_', ' ')} {data[k]}" for k in ("queue", "node", "priority_class") if data.get(k)), "")
    if before is None:
        return f"created {what}".strip()
    if after is None:
        return f"deleted {what}".strip()
    parts = []
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k), after.get(k)
        if b == a:
            continue
        if isinstance(b, dict) or isinstance(a, dict):
            b, a = b or {}, a or {}
            parts += [f"{k}.{kk}: {_short(b.get(kk))} → {_short(a.get(kk))}"
                      for kk in sorted(set(b) | set(a)) if b.get(kk) != a.get(kk)]
        else:
            parts.append(f"{k}: {_short(b)} → {_short(a)}")
    return (f"{what}: " if what else "") + ("; ".join(parts) or "no change")


def usage_bars(spec, tree, capacity: dict) -> list[dict]:
    """One bar per resource the queue is governed on: used against guarantee and limit."""
    name = spec.name
    used, guar, lim = tree.usage.get(name, {}), tree.guaranteed.get(name, {}), spec.limit
    keys = [GPU] + sorted(k for k in set(used) | set(guar) | set(lim) if is_flavor(k))
    keys += [k for k in (CPU, MEMORY) if guar.get(k) or lim.get(k)]
    bars = []
    for k in keys:
        u, g, cap = used.get(k, 0), guar.get(k, 0), lim.get(k)
        scale = max(cap if cap is not None else capacity.get(k, 0), g, u, 1)
        bars.append({
            "resource": label(k), "used": fmt_amount(k, u), "guaranteed": fmt_amount(k, g),
            "limit": fmt_amount(k, cap) if cap is not None else None,
            "borrowing": fmt_amount(k, u - g) if u > g else None,
            "used_pct": round(100 * min(u, g) / scale, 1),
            "borrow_pct": round(100 * max(0, u - g) / scale, 1),
            "guar_pct": round(100 * g / scale, 1),
            "scale": fmt_amount(k, scale),
        })
    return bars


# --- handlers ------------------------------------------------------------------------


class PageHandler(BaseHandler):
    """A page: redirects to the hub's login (the API answers 401 instead) and shows errors as HTML."""

    def get_login_url(self):
        return HubOAuthenticated.get_login_url(self)

    def set_default_headers(self):
        self.set_header("Cache-Control", "no-store")
        self.set_header("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                                   "frame-ancestors 'self'; form-action 'self'; base-uri 'none'")

    def get_template_namespace(self):
        ns = super().get_template_namespace()
        svc = self.service
        try:
            xsrf = to_unicode(self.xsrf_token)
        except Exception:   # an error page must render even when the token cannot be made
            app_log.exception("could not make an XSRF token for %s", self.request.path)
            xsrf = ""
        ns.update(prefix=svc.path(""), api=svc.path("api/v1/"), nav=NAV, active=getattr(self, "active", ""),
                  fmt_time=fmt_time, iso_time=iso_time, fmt_vector=fmt_vector, fmt_duration=fmt_duration,
                  fmt_cores=fmt_cores, fmt_eta=fmt_eta,
                  me=None, xsrf_token=xsrf, now=time.time(), pending_count=0, approvals_count=0)
        return ns

    def write_error(self, status_code: int, **kwargs):
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, APIError):
            message = exc.message
        elif isinstance(exc, SchedulerError):
            message = exc.to_dict().get("message", str(exc))
        elif isinstance(exc, web.HTTPError) and status_code < 500:
            message = exc.log_message or self._reason
        else:
            message = "internal error; the service log has the details"
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        try:
            model = getattr(self, "_hub_auth_user_cache", None)
            self.render("error.html", status=status_code, reason=self._reason, message=message,
                        me=Caller(model) if model else None)
        except Exception:   # never fail while reporting a failure
            app_log.exception("rendering the error page failed")
            if not self._finished:
                self.finish(f"{status_code}: {xhtml_escape(message)}")


class LandingPage(PageHandler):
    active = ""

    @web.authenticated
    async def get(self):
        caller = self.caller
        svc = self.service
        mine = array_rows(await svc.snapshot_for(caller)) if caller.kind == "user" else []
        try:        # the latest few that ended, from the database: the page still shows the rest without it
            ended = [views.workload(w) for w in svc.sched.store.get_workloads(
                user=caller.name, states=TERMINAL, newest_first=True, limit=RECENT_ENDED)] \
                if caller.kind == "user" else []
        except StoreUnavailable:
            ended, self.history_error = [], "the service's database is unavailable; try again later"
        ended.sort(key=lambda w: w.get("ended_at") or 0, reverse=True)
        self.render("landing.html", me=caller, workloads=mine, ended=ended,
                    history_error=getattr(self, "history_error", ""))


class AdminPage(PageHandler):
    template = ""

    @web.authenticated
    async def get(self):
        caller = self.caller
        if not caller.is_admin:
            raise APIError(403, "forbidden", NEED_ADMIN)
        ctx = await self.context()         # first: it may wait for start estimates (estimates.py)
        st = self.service.sched.state
        self.render(self.template, me=caller, pending_count=len(st.pending),
                    approvals_count=len(self.service.sched.approvals()), **ctx)

    async def context(self) -> dict:
        return {}


class QueuesPage(AdminPage):
    template, active = "admin_queues.html", "admin/"

    async def context(self):
        sched = self.service.sched
        tree = sched.state.tree
        per_queue = counts(sched)
        capacity = sched.state.inventory.capacity

        def walk(names, depth=0):
            for n in sorted(names):
                yield n, depth
                yield from walk(tree.children.get(n, []), depth + 1)

        roots = [n for n, s in tree.specs.items() if s.parent is None or s.parent not in tree.specs]
        rows = [{"q": views.queue(tree.specs[name], tree, per_queue), "depth": depth,
                 "bars": usage_bars(tree.specs[name], tree, capacity)} for name, depth in walk(roots)]
        return {"rows": rows}


class NodesPage(AdminPage):
    template, active = "admin_nodes.html", "admin/nodes"

    async def context(self):
        st = self.service.sched.state
        return {"nodes": [views.node(n, st.holders_on(name)) for name, n in sorted(st.inventory.nodes.items())]}


class PendingPage(AdminPage):
    template, active = "admin_pending.html", "admin/pending"

    async def context(self):
        svc = self.service
        sched = svc.sched
        positions = svc.positions
        pending = sched.workloads(states=(PENDING,))
        pending.sort(key=lambda w: (positions.get(w.id, (10**9, 0))[0], w.seq))
        by_id = {w.id: w for w in pending}
        rows = array_rows([views.workload(w, positions) for w in pending])
        for i, d in enumerate(rows):          # a row of an array's tasks: its first one's reason and ETA
            w = by_id[d["id"]]
            e = await svc.estimates.planned(w) or (await svc.estimates.unplanned(w) if i < EXPLAIN_MAX
                                                   else brief(svc, w))
            d.update(reason=e.get("reason"), eta_seconds=e.get("eta_seconds"), eta_reason=e.get("eta_reason"),
                     eta_earliest=e.get("eta_earliest", False))
        # Held work is out of line (no position): what keeps it back, said apart.
        held = sched.workloads(states=(HELD,))
        held_rows = array_rows([dict(views.workload(w), reason=sched.waits_for(w)) for w in held])
        held_by_id = {w.id: w for w in held}
        timed = [d for d in held_rows if hold_until(held_by_id[d["id"]])]
        after = [d for d in held_rows if held_by_id[d["id"]].after and not hold_until(held_by_id[d["id"]])]
        for i, d in enumerate(timed + after):
            # From its begin time (no simulation), or from when what it runs after ends: the line
            # plan's, else an estimate of its own for at most EXPLAIN_MAX.
            w = held_by_id[d["id"]]
            e = await svc.estimates.planned(w) or (await svc.estimates.unplanned(w)
                                                   if i < len(timed) + EXPLAIN_MAX else None)
            if e is None:
                continue
            d.update(eta_seconds=e.get("eta_seconds"), eta_reason=e.get("eta_reason"),
                     eta_earliest=e.get("eta_earliest", False))
        return {"rows": rows, "explain_max": EXPLAIN_MAX, "held": held_rows, "held_count": len(held),
                "pending_tasks": len(pending)}


class ApprovalsPage(AdminPage):
    template, active = "admin_approvals.html", "admin/approvals"

    async def context(self):
        return {"rows": array_rows([views.workload(w) for w in self.service.sched.approvals()])}


def array_rows(items: list[dict]) -> list[dict]:
    """Each job array's tasks waiting in the same state as one row (``collapse``, as squeue shows
    them), with ``array_label`` saying which: "tasks 4-19 of array w0000050 (16 tasks)"."""
    rows = collapse(items)
    for d in rows:
        a = d.get("array")
        if a:
            indexes = d.get("waiting_indexes") or [a["index"]]
            d["array_label"] = (f"task {indexes[0]} of array {a['id']}" if len(indexes) == 1 else
                                f"tasks {compact(indexes)} of array {a['id']} ({len(indexes)} tasks)")
    return rows


class AuditPage(AdminPage):
    template, active = "admin_audit.html", "admin/audit"

    async def context(self):
        store = self.service.sched.store
        last = store.last_event_id()
        events = store.get_events(after_id=max(0, last - AUDIT_ROWS))[-AUDIT_ROWS:]
        rows = []
        for e in reversed(events):
            data = e.data or {}
            actor = data.get("actor") or (data.get("user") if e.kind == "submitted" else "") or "scheduler"
            rows.append({"id": e.id, "time": e.time, "kind": e.kind, "actor": actor,
                         "workload": e.workload_id or "", "reason": e.reason, "change": change_summary(data)})
        return {"rows": rows, "limit": AUDIT_ROWS}
