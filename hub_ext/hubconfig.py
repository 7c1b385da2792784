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
    _check_arguments(name=name, port=port, url=url, api_token=api_token, data_dir=data_dir, db_url=db_url,
                     config_file=config_file, admins=admins, team_leads=team_leads,
                     on_behalf_services=on_behalf_services, environment=environment,
                     notebook_watch=notebook_watch, launcher=launcher,
                     concurrent_spawn_limit=concurrent_spawn_limit, inventory_services=inventory_services,
                     tokens={"launcher_api_token": launcher_api_token, "inventory_api_token": inventory_api_token,
                             "spawner_api_token": spawner_api_token, "metrics_api_token": metrics_api_token})
    admins, on_behalf_services, inventory_services = list(admins), list(on_behalf_services), list(inventory_services)
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



def _names(arg: str, value, what: str) -> None:
    """A list of names; a lone string would be read letter by letter ("ada": users a, d, a)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise TypeError(f"configure_jupyterhub({arg}=...) takes a list of {what}, e.g. {arg}=[{value!r}], "
                        f"not {type(value).__name__} {value!r}")
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        raise TypeError(f"configure_jupyterhub({arg}=...): every entry must be a {what[:-1]} (text), not {bad[0]!r}")


def _check_arguments(*, name, port, url, api_token, data_dir, db_url, config_file, admins, team_leads,
                     on_behalf_services, environment, notebook_watch, launcher, concurrent_spawn_limit,
                     inventory_services, tokens) -> None:
    """configure_jupyterhub's arguments, checked before anything of ``c`` is changed: a mistake
    stops the hub's start with a message naming the argument (never a role granted to the
    wrong names, or a setting silently dropped)."""
    if not isinstance(name, str) or not name or any(ch in name for ch in "/ ?#%"):
        raise ValueError(f"configure_jupyterhub(name=...) must be a service name like 'computehub', not {name!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"configure_jupyterhub(port=...) must be a port from 1 to 65535, not {port!r}")
    _names("admins", admins, "user names")
    _names("on_behalf_services", on_behalf_services, "service names")
    _names("inventory_services", inventory_services, "service names")
    if team_leads is not None:
        if not isinstance(team_leads, dict):
            raise TypeError("configure_jupyterhub(team_leads=...) maps a group to its leads, e.g. "
                            f"team_leads={{'vision': ['lin']}}, not {team_leads!r}")
        for group, leads in team_leads.items():
            if not isinstance(group, str) or not group:
                raise TypeError(f"configure_jupyterhub(team_leads=...): {group!r} is no group name")
            _names(f"team_leads[{group!r}]", leads, "user names")
    for arg, value in dict(tokens, api_token=api_token, url=url, data_dir=data_dir, db_url=db_url,
                           config_file=config_file).items():
        if value is not None and (not isinstance(value, str) or not value):
            raise TypeError(f"configure_jupyterhub({arg}=...) must be text, not {value!r}")
    if url is not None and not url.startswith(("http://", "https://")):
        raise ValueError(f"configure_jupyterhub(url=...) must be the service's http(s):// URL, not {url!r}")
    if api_token and not url:
        raise ValueError("configure_jupyterhub(api_token=...) is an external service's token: give its url= "
                         "too (a managed service gets its token from the hub)")
    if url:
        # These shape the command the hub runs for a managed service; an external one ignores them.
        ignored = [a for a, v in (("db_url", db_url), ("environment", environment)) if v] + \
            ([a for a, v in (("data_dir", data_dir), ("config_file", config_file)) if v] if not launcher else [])
        if ignored:
            raise ValueError(f"configure_jupyterhub({', '.join(a + '=...' for a in ignored)}): these set up the "
                             "service the hub runs itself; with url= (an external service) set them in that "
                             "service's own config (c.ComputeHubService.db_url, its --data-dir)")
    if environment is not None and (not isinstance(environment, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in environment.items())):
        raise TypeError(f"configure_jupyterhub(environment=...) maps variable names to text, not {environment!r}")
    if concurrent_spawn_limit is not None and (isinstance(concurrent_spawn_limit, bool) or not isinstance(
            concurrent_spawn_limit, int) or concurrent_spawn_limit < 0):
        raise ValueError("configure_jupyterhub(concurrent_spawn_limit=...) must be a whole number (0 = no "
                         f"limit), not {concurrent_spawn_limit!r}")
    if not isinstance(notebook_watch, (bool, dict)):
        raise TypeError("configure_jupyterhub(notebook_watch=...) is True, False or a dict of NotebookWatch "
                        f"settings like {{'interval': 30}}, not {notebook_watch!r}")
    if isinstance(notebook_watch, dict) and notebook_watch:
        from scheduler.config_checks import describe
        from spawner.notebook_watch import NotebookWatch
        known = NotebookWatch.class_trait_names(config=True)
        for key, value in notebook_watch.items():
            if key not in known:
                raise ValueError(f"configure_jupyterhub(notebook_watch=...): {key!r} is no NotebookWatch setting "
                                 f"(settings: interval, orphan_grace, gpu_busy_percent, restart_without_gpu, "
                                 "hub_api_url, computehub_url)")
        try:
            NotebookWatch(**notebook_watch)
        except Exception as e:      # noqa: BLE001 - the watch's own check, said as this argument's
            raise ValueError(f"configure_jupyterhub(notebook_watch=...): {describe(e)}") from None
