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

from .scopes import ADMIN, CUSTOM_SCOPES, ON_BEHALF, READ_METRICS, SUBMIT, TEAM


TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hub_templates")


def configure_jupyterhub(c, *, name: str = "computehub", port: int = 10101, url: str | None = None,
                         api_token: str | None = None, data_dir: str | None = None, db_url: str | None = None,
                         config_file: str | None = None, admins=(), team_leads: dict | None = None,
                         on_behalf_services=(), environment: dict | None = None) -> dict:
    """Add ComputeHub to a JupyterHub config ``c``; returns the service entry.

    ``url`` + ``api_token`` register an external service (Kubernetes); without
    them the hub manages ``computehub serve`` on 127.0.0.1:``port``.
    """
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
    c.JupyterHub.load_roles = roles
    # The hub's home page links ComputeHub (and its admin pages, for its admins).
    paths = [p for p in _get(c.JupyterHub, "template_paths", []) if p != TEMPLATES]
    c.JupyterHub.template_paths = [TEMPLATES] + paths
    tv = dict(_get(c.JupyterHub, "template_vars", {}))
    tv.update(computehub_url=f"/services/{name}/", computehub_admin_role=f"{name}-admin")
    c.JupyterHub.template_vars = tv
    return service


def _get(section, key, empty):
    """A value already set in a traitlets config section (unset values are lazy placeholders)."""
    return section[key] if key in section else empty
