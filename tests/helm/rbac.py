"""Kubernetes RBAC, read the way the API server reads it: which verb on which resource a
request is, and whether a Role's rules allow it. For checking the chart's roles against the
requests ComputeHub's pods really made (recorded by tests/spawner/kmock_cluster.py)."""

from __future__ import annotations

import re

# /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]]  or  /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUB]]
PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
                  r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")


def request_rbac(method: str, path: str, query: dict) -> tuple[str, str, str, str | None]:
    """(apiGroup, resource or resource/subresource, verb, namespace) of one request."""
    m = PATH.match(path)
    if not m:
        raise ValueError(f"not a Kubernetes resource path: {path}")
    if m["resource"] == "namespaces" and not m["ns"] and m["name"] is None:
        raise ValueError(f"namespace listing: {path}")
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    collection = m["name"] is None
    if method == "GET":
        verb = ("watch" if str(query.get("watch", "")).lower() in ("true", "1") else "list") if collection else "get"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "deletecollection" if collection else "delete"}[method]
    return m["group"] or "", resource, verb, m["ns"]


def allows(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
               for r in rules)


def needed(requests, user_agent_prefix: str = "OpenAPI-Generator") -> set[tuple[str, str, str, str | None]]:
    """What the recorded requests of kubernetes_asyncio clients needed (the tests' own are left out)."""
    return {request_rbac(method, path, query) for method, path, query, agent in requests
            if agent.startswith(user_agent_prefix)}
