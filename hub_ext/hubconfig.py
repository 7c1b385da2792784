"""Register ComputeHub in ``jupyterhub_config.py`` in a few lines.

    from hub_ext.hubconfig import configure_jupyterhub
    configure_jupyterhub(c, admins=["ada"], team_leads={"vision": ["lin"]})

This declares the custom scopes, registers the service (managed: the hub starts
``computehub serve`` and restarts it if it dies; or external with ``url=`` and
``api_token=``), lets every hub user submit and see their own work, gives the
admins ComputeHub's admin scope and team leads their team's view, and lets
browser logins carry those scopes to the service.
"""

from __future__ import annotations

import os
import sys

from .scopes import ADMIN, CUSTOM_SCOPES, NODES, ON_BEHALF, READ_METRICS, SUBMIT, TEAM


TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hub_templates")


def configure_jupyterhub(c, *, name: str = "computehub", port: int = 10101, url: str | None = None,
                         api_token: str | None = None, data_dir: str | None = None, db_url: str | None = None,
                         config_file: str | None = None, admins=(), team_leads: dict | None = None,
                         on_behalf_services=(), environment: dict | None = None,
                         notebook_watch: dict | bool = False, launcher: bool = False,
                         concurrent_spawn_limit: int | None = None, launcher_api_token: str | None = None,
                         inventory_services=(), inventory_api_token: str | None = None,
                         spawner_api_token: str | None = None, metrics_api_token: str | None = None) -> dict:
    """Add ComputeHub to a JupyterHub config ``c``; returns the service entry.

    ``url`` + ``api_token`` register an external service (Kubernetes); without
    them the hub manages ``computehub serve`` on 127.0.0.1:``port``.
    ``notebook_watch`` (True, or a dict of ``NotebookWatch`` settings such as
    ``{"interval": 30}``) adds the managed ``computehub-notebooks`` service that
    reclaims idle GPU notebooks and withdraws workloads whose server is gone.
    JupyterHub's ``concurrent_spawn_limit`` counts spawns waiting in ComputeHub's
    queue and would turn queued users away: it is turned off, and the limit
    (``concurrent_spawn_limit``, else the hub's value if set) applies to servers
    starting after admission instead (``QueueingMixin.concurrent_start_limit``).
    ``launcher=True`` adds the managed ``<name>-launcher`` service (spawner/launcher_app.py)
    that runs %submit / %serve work as local processes (docs/launchers.md).
    On Kubernetes the launcher and the node inventory run as their own pods (helm/computehub):
    ``launcher_api_token`` registers the external ``<name>-launcher`` service with that token
    (submit on behalf), ``inventory_api_token`` the external ``<name>-inventory`` service
    (``custom:computehub:nodes``: it registers the cluster's nodes). ``inventory_services``
    names other services that may register nodes. ``spawner_api_token`` is the token the
    hub's queueing spawner submits notebooks with (the ``<name>-spawner`` service, on behalf);
    ``metrics_api_token`` the one Prometheus scrapes ``/metrics`` with (``<name>-metrics``).
    The service's paths include the hub's ``c.JupyterHub.base_url``: set it before this call.
    """
    base = "/" + _get(c.JupyterHub, "base_url", "/").strip("/") + "/"
    base = "/" if base == "//" else base
    custom = dict(_get(c.JupyterHub, "custom_scopes", {}))
    custom.update(CUSTOM_SCOPES)
    c.JupyterHub.custom_scopes = custom
    access = f"access:services!service={name}"
    # The service is the hub admins' own: its pages need no extra "authorize" click.
    service = {"name": name, "display": True, "oauth_no_confirm": True,
               "oauth_client_allowed_scopes": [SUBMIT, TEAM, ADMIN, ON_BEHALF, READ_METRICS, access]}
    if url:
        service["url"] = url
        if api_token:
            service["api_token"] = api_token
    else:
        cmd = [sys.executable, "-m", "hub_ext", "serve"]
        if config_file:
            cmd += [f"--config={config_file}"]
        if data_dir:
            cmd += [f"--data-dir={data_dir}"]
        if db_url:
            cmd += [f"--db-url={db_url}"]
        service.update(url=f"http://127.0.0.1:{port}", command=cmd)
        if environment:
            service["environment"] = dict(environment)
    services = [s for s in _get(c.JupyterHub, "services", []) if s.get("name") != name]
    c.JupyterHub.services = services + [service]
    if launcher:
        on_behalf_services = list(on_behalf_services) + [_add_launcher(c, name, url or f"http://127.0.0.1:{port}",
                                                                       config_file, data_dir, base)]
    if launcher_api_token:
        on_behalf_services = list(on_behalf_services) + [_add_external(c, f"{name}-launcher", launcher_api_token)]
    if spawner_api_token:
        on_behalf_services = list(on_behalf_services) + [_add_external(c, f"{name}-spawner", spawner_api_token)]
        c.QueueingMixin.computehub_token = spawner_api_token
    if inventory_api_token:
        inventory_services = list(inventory_services) + [_add_external(c, f"{name}-inventory", inventory_api_token)]
    # A single-user server's $JUPYTERHUB_API_TOKEN may call the service (%submit, the lab extension):
    # the hub's default server scopes (its "server" role) plus submitting and reaching the service.
    server_scopes = _get(c.Spawner, "server_token_scopes", None)
    if not callable(server_scopes):
        c.Spawner.server_token_scopes = sorted(set(server_scopes or ["users:activity!user", "access:servers!server"])
                                               | {SUBMIT, access})

    roles = [dict(r) for r in _get(c.JupyterHub, "load_roles", [])]
    names = {r["name"] for r in roles}

    def add(role):
        if role["name"] in names:
            for r in roles:
                if r["name"] == role["name"]:
                    r["scopes"] = sorted(set(r.get("scopes", [])) | set(role["scopes"]))
                    for k in ("users", "groups", "services"):
                        if role.get(k):
                            r[k] = sorted(set(r.get(k, [])) | set(role[k]))
        else:
            roles.append(role)
            names.add(role["name"])

    # Every user: their own things as before, plus submitting and seeing their own work.
    add({"name": "user", "scopes": ["self", SUBMIT, access]})
    # The service reads users' groups to pick queues for work submitted on their behalf.
    add({"name": f"{name}-service", "scopes": ["read:users:groups", "read:users:name"], "services": [name]})
    if admins:
        add({"name": f"{name}-admin", "scopes": [ADMIN, READ_METRICS, access], "users": list(admins)})
    for group, leads in (team_leads or {}).items():
        add({"name": f"{name}-lead-{group}", "scopes": [f"{TEAM}!group={group}", access], "users": list(leads)})
    if on_behalf_services:
        # Spawners and launchers submit, watch and report on behalf of users.
        add({"name": f"{name}-on-behalf", "scopes": [ON_BEHALF, access], "services": list(on_behalf_services)})
    if metrics_api_token:
        add({"name": f"{name}-metrics", "scopes": [READ_METRICS, access],
             "services": [_add_external(c, f"{name}-metrics", metrics_api_token)]})
    if inventory_services:
        # Inventory sources register the cluster's nodes, and nothing else.
        add({"name": f"{name}-inventory", "scopes": [NODES, access], "services": list(inventory_services)})
    limit = concurrent_spawn_limit if concurrent_spawn_limit is not None else \
        _get(c.JupyterHub, "concurrent_spawn_limit", None)
    if limit is not None:
        c.QueueingMixin.concurrent_start_limit = limit
    c.JupyterHub.concurrent_spawn_limit = 0
    if notebook_watch:
        _add_notebook_watch(c, service, add, {} if notebook_watch is True else dict(notebook_watch), base)
    c.JupyterHub.load_roles = roles
    # The hub's home page links ComputeHub (and its admin pages, for its admins).
    paths = [p for p in _get(c.JupyterHub, "template_paths", []) if p != TEMPLATES]
    c.JupyterHub.template_paths = [TEMPLATES] + paths
    tv = dict(_get(c.JupyterHub, "template_vars", {}))
    tv.update(computehub_url=f"{base}services/{name}/", computehub_admin_role=f"{name}-admin")
    c.JupyterHub.template_vars = tv
    return service


def _add_launcher(c, name: str, service_url: str, config_file, data_dir, base: str = "/") -> str:
    """Register the managed launcher service; returns its name (it needs the on-behalf role)."""
    lname = f"{name}-launcher"
    cmd = [sys.executable, "-m", "spawner.launcher_app"]
    if config_file:
        cmd += [f"--config={config_file}"]
    if data_dir:
        cmd += [f"--data-dir={data_dir}"]
    entry = {"name": lname, "command": cmd,
             "environment": {"COMPUTEHUB_URL": service_url.rstrip("/") + f"{base}services/{name}"}}
    c.JupyterHub.services = [s for s in c.JupyterHub.services if s.get("name") != lname] + [entry]
    return lname


def _add_external(c, sname: str, api_token: str) -> str:
    """Register a service that runs elsewhere (its own pod) and calls in with ``api_token``."""
    services = [s for s in _get(c.JupyterHub, "services", []) if s.get("name") != sname]
    c.JupyterHub.services = services + [{"name": sname, "api_token": api_token}]
    return sname


def _get(section, key, empty):
    """A value already set in a traitlets config section (unset values are lazy placeholders)."""
    return section[key] if key in section else empty


def _add_notebook_watch(c, service: dict, add, settings: dict, base: str = "/") -> None:
    """The managed ``<name>-notebooks`` service (spawner/notebook_watch.py) and its role."""
    name = service["name"]
    watch = f"{name}-notebooks"
    cmd = [sys.executable, "-m", "spawner.notebook_watch"]
    cmd += [f"--NotebookWatch.{k}={v}" for k, v in sorted(settings.items())]
    env = {"COMPUTEHUB_URL": service["url"].rstrip("/") + f"{base}services/{name}"}
    services = [s for s in _get(c.JupyterHub, "services", []) if s.get("name") != watch]
    c.JupyterHub.services = services + [{"name": watch, "command": cmd, "environment": env}]
    add({"name": watch, "services": [watch],
         "scopes": ["list:users", "read:users:activity", "read:users:name", "read:servers", "delete:servers",
                    "servers", ON_BEHALF, f"access:services!service={name}"]})

