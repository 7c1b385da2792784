"""The service's settings, checked when they are set (``@validate``) and at start, before it
serves anything or talks to the hub: a mistaken ``computehub_config.py`` or command-line
option stops ``computehub serve`` with one line (``computehub: error: ...``, exit 2)
that names the setting, never a traceback or a service that runs on a setting it ignored.
Mixed into ``ComputeHubService``."""

from __future__ import annotations

import os
import re
import time

from traitlets import validate

from scheduler import ValidationError
from scheduler.errors import Conflict, StoreUnavailable
from scheduler.store.exclusive import HeldElsewhere, holder_record
from scheduler.store.sql import SqlStore
from scheduler.validation import MODEL, node as check_node, queue as check_queue, queue_tree
from scheduler.config_checks import ConfigError, StrictConfig, check_number, check_url, recheck

S = "ComputeHubService"
# A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name of at most 63.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
LABEL_VALUE = re.compile(rf"^({_NAME})?$")


def _named(d) -> str:
    return f" ({d['name']!r})" if isinstance(d, dict) and isinstance(d.get("name"), str) else ""


class ServiceConfig(StrictConfig):
    """Validators of ``ComputeHubService``'s settings and the checked steps of its start."""

    def owned_config_classes(self) -> list[type]:
        from scheduler import EngineConfig
        return [type(self), EngineConfig]

    @validate("cycle_interval")
    def _cycle_interval(self, proposal):
        return check_number(f"{S}.cycle_interval", proposal.value, low=0, low_open=True, unit="seconds")

    @validate("cycle_delay", "cycle_min_interval", "other_service_wait", "database_timeout")
    def _cycle_pauses(self, proposal):
        return check_number(f"{S}.{proposal.trait.name}", proposal.value, low=0, unit="seconds")

    @validate("estimate_reuse")
    def _estimate_reuse(self, proposal):
        return check_number(f"{S}.estimate_reuse", proposal.value, low=0, unit="times as long as it took")

    @validate("url")
    def _url_ok(self, proposal):
        return check_url(f"{S}.url (--url; default $JUPYTERHUB_SERVICE_URL)", proposal.value)

    @validate("service_prefix")
    def _prefix_ok(self, proposal):
        if not proposal.value.startswith("/"):
            raise ConfigError(f"{S}.service_prefix (default $JUPYTERHUB_SERVICE_PREFIX) must be a path "
                              "starting with '/', e.g. "
                              f"/services/computehub/, not {proposal.value!r}")
        return proposal.value

    @validate("db_url")
    def _db_url_ok(self, proposal):
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError
        try:
            u = make_url(proposal.value)
        except ArgumentError:
            raise ConfigError(f"{S}.db_url = {proposal.value!r} is not a database URL; use "
                              "sqlite:////path/computehub.sqlite or postgresql+psycopg://user@host/db") from None
        shown = u.render_as_string(hide_password=True)
        try:
            u.get_dialect().import_dbapi()          # the database kind and its driver are there
        except (NoSuchModuleError, ImportError) as e:
            raise ConfigError(f"{S}.db_url = {shown}: {_first_line(e)} (PostgreSQL: "
                              "postgresql+psycopg://user@host/db, with psycopg installed)") from None
        if u.get_backend_name() == "sqlite" and (u.database in (None, "", ":memory:")
                                                 or u.query.get("mode") == "memory"):
            raise ConfigError(f"{S}.db_url = {proposal.value!r} is an in-memory database: every queue and "
                              "workload would be lost when the service stops; name a file "
                              "(sqlite:////srv/computehub/computehub.sqlite) or PostgreSQL")
        return proposal.value

    @validate("prices")
    def _prices_ok(self, proposal):
        for flavor, price in proposal.value.items():
            if not isinstance(flavor, str) or not (flavor == "any" or MODEL.match(flavor)):
                raise ConfigError(f"{S}.prices: {flavor!r} is no GPU model; keys are models in lower case "
                                  "like 'a100' (as nodes' gpu_model), or 'any' for GPUs of no stated model")
            check_number(f"{S}.prices[{flavor!r}]", price, low=0, unit="price per GPU-hour")
        return proposal.value

    @validate("allowed_node_selectors")
    def _selectors_ok(self, proposal):
        for entry in proposal.value:
            key, eq, value = entry.partition("=")
            if not LABEL_KEY.match(key) or (eq and not LABEL_VALUE.match(value)):
                raise ConfigError(f"{S}.allowed_node_selectors: {entry!r} is neither a node label key "
                                  "('zone', 'example.com/rack') nor key=value ('zone=east'); give a list "
                                  "of them, one per entry")
        return proposal.value

    @validate("nodes")
    def _nodes_ok(self, proposal):
        seen = set()
        for i, d in enumerate(proposal.value):
            try:
                spec = check_node(d)
            except ValidationError as e:
                raise ConfigError(f"{S}.nodes[{i}]{_named(d)}: {e}") from None
            if spec.name in seen:
                raise ConfigError(f"{S}.nodes[{i}]: node {spec.name!r} is listed twice")
            seen.add(spec.name)
        return proposal.value

    @validate("initial_queues")
    def _queues_ok(self, proposal):
        specs = []
        for i, d in enumerate(proposal.value):
            try:
                specs.append(check_queue(d))
            except ValidationError as e:
                raise ConfigError(f"{S}.initial_queues[{i}]{_named(d)}: {e}") from None
            if specs[-1].name in {s.name for s in specs[:-1]}:
                raise ConfigError(f"{S}.initial_queues[{i}]: queue {specs[-1].name!r} is listed twice")
        try:
            queue_tree(specs)
        except ValidationError as e:
            raise ConfigError(f"{S}.initial_queues: {e}") from None
        return proposal.value

    # --- start ---------------------------------------------------------------------------

    def prepare_dirs(self) -> None:
        """The defaults too ($JUPYTERHUB_SERVICE_URL, $JUPYTERHUB_SERVICE_PREFIX), then the folders."""
        recheck(self, ["url", "service_prefix", "db_url"])
        for d in (self.data_dir, os.path.join(self.data_dir, "logs")):
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"{S}.data_dir: cannot create {d}: {e.strerror or e}") from None
        if self.audit_log_file:
            try:
                open(self.audit_log_file, "a").close()
            except OSError as e:
                raise ConfigError(f"{S}.audit_log_file: cannot write {self.audit_log_file}: "
                                  f"{e.strerror or e}") from None

    def open_store(self) -> SqlStore:
        """The database of ``db_url``, held by this service alone (``scheduler/store/exclusive.py``):
        taken before anything is written (migrations included), or one line saying why not."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import SQLAlchemyError
        shown = make_url(self.db_url).render_as_string(hide_password=True)
        store = None
        try:
            store = SqlStore(self.db_url, migrate=False, timeout=self.database_timeout)
            self._hold_store(store)
            return store
        except HeldElsewhere as e:
            store.close()
            # Exit 1: it is not a setting to fix, and the other service may be gone by the next try.
            raise ConfigError(f"{e}: stop it first", status=1) from None
        except (SQLAlchemyError, StoreUnavailable) as e:
            if store is not None:
                store.close()
            why = e.detail if isinstance(e, StoreUnavailable) else _first_line(getattr(e, "orig", None) or e)
            hint = " (does its folder exist, and may the service write there?)" \
                if shown.startswith("sqlite") else ""
            # The database may only be down for now: exit 1, so whoever restarts the service may retry.
            raise ConfigError(f"cannot open the database {shown} ({S}.db_url): {why}{hint}", status=1) from None

    def _hold_store(self, store: SqlStore) -> None:
        """Take the database (waiting up to ``other_service_wait`` for another service to let go)."""
        deadline = time.monotonic() + self.other_service_wait
        told = False
        while True:
            try:
                store.hold_exclusively(holder_record(self.url))
                return
            except HeldElsewhere as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                if not told:
                    self.log.warning("%s; waiting up to %.0f s for it to stop (%s.other_service_wait)",
                                     e, left, S)
                    told = True
                time.sleep(min(0.5, left))

    def apply_start_config(self) -> None:
        """Register ``nodes``; create ``initial_queues`` (parents first) when there are none yet."""
        for i, n in enumerate(self.nodes):
            try:
                self.sched.put_node(n, actor="config")
            except (ValidationError, Conflict) as e:
                raise ConfigError(f"{S}.nodes[{i}]{_named(n)}: {e}") from None
        if self.sched.state.tree.specs:
            return
        pending, done = list(self.initial_queues), set()
        while pending:                  # the list may name a child before its parent
            ready = [q for q in pending if q.get("parent") is None or q["parent"] in done]
            if not ready:               # not after the checks above; never loop for ever
                raise ConfigError(f"{S}.initial_queues: queues {[q['name'] for q in pending]} name "
                                  "parents that are not created")
            for q in ready:
                self.sched.put_queue(q, actor="config")
                done.add(q["name"])
            pending = [q for q in pending if q["name"] not in done]


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
