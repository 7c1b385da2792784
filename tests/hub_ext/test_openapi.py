"""The OpenAPI document matches the application, both ways, and is valid OpenAPI 3.

* every API route of ``ComputeHubService.make_app()`` (not the OAuth callback,
  static files or the admin pages) is a path of the document, with every HTTP
  method its handler implements;
* every path + method of the document is routed on the running service (a real
  hub and proxy): it reaches the handler, never tornado's 404/405;
* the served document is the one the code builds and validates as OpenAPI 3
  (``openapi-spec-validator``).
"""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate
from tornado import web

from hub_ext.app import VERSION, ComputeHubService
from hub_ext.openapi import document
from hub_ext.pages import page_handlers

PREFIX = "/services/computehub"
METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
GROUP = re.compile(r"\(\?P<(\w+)>(?:\[\^/\]\+|\.\*)\)")    # [^/]+ or, for serve/{id}/{path}, .*


def api_routes(tmp_path) -> dict[str, tuple[type, set[str]]]:
    """``{"/api/v1/workloads/{workload_id}": (handler class, {"get", "delete"}), ...}``."""
    svc = ComputeHubService(data_dir=str(tmp_path), service_prefix=PREFIX + "/")
    app = svc.make_app()
    pages = {pattern for pattern, *_ in page_handlers(PREFIX)}
    out = {}
    for rule in app.wildcard_router.rules:
        regex, target = rule.matcher.regex.pattern, rule.target
        if (not isinstance(target, type) or issubclass(target, web.StaticFileHandler)
                or target.__name__ == "HubOAuthCallbackHandler" or regex.rstrip("$") in pages):
            continue
        assert regex.startswith(PREFIX + "/") and regex.endswith("$"), regex
        template = GROUP.sub(r"{\1}", regex[len(PREFIX):-1])
        assert not set(template) & set("()[]*+?\\^$"), f"route {regex} is not a plain path template"
        methods = {m for m in METHODS if getattr(target, m) is not getattr(web.RequestHandler, m)}
        out[template] = (target, methods)
    return out


def sample(template: str) -> str:
    return re.sub(r"\{\w+\}", "no-such-thing", template)


@pytest.fixture(scope="module")
def served(hub):
    r = hub.call("GET", "/openapi.json", hub.tokens["alice"])
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json()


def test_document_is_valid_openapi3(served):
    validate(served)
    assert served["openapi"].startswith("3.")
    assert served == document(VERSION)


def test_every_route_is_documented_with_every_method(tmp_path, served):
    routes = api_routes(tmp_path)
    assert "/api/v1/workloads" in routes and "/metrics" in routes      # the walk found the routes
    paths = served["paths"]
    missing = sorted(set(routes) - set(paths))
    assert not missing, f"routes not in the OpenAPI document: {missing}"
    for template, (cls, methods) in routes.items():
        documented = {m for m in paths[template] if m in METHODS}
        assert methods <= documented, f"{template}: {cls.__name__} implements {sorted(methods - documented)} " \
                                      f"but the document does not describe it"
        assert documented <= methods, f"{template}: documents {sorted(documented - methods)} " \
                                      f"which {cls.__name__} does not implement"


def test_every_documented_path_is_routed(tmp_path, served):
    routes = api_routes(tmp_path)
    for template, item in served["paths"].items():
        assert template in routes, f"{template} is documented but not routed"
        declared = {p["name"] for op in item.values() if isinstance(op, dict)
                    for p in op.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", template)), template


def test_every_documented_operation_answers_on_the_service(hub, served):
    """A token the hub knows but without access to the service reaches every handler
    (403 from the handler's scope check, no side effects); routing would answer 404/405."""
    for template, item in served["paths"].items():
        for method in (m for m in item if m in METHODS):
            r = _request(hub, method, sample(template), hub.nobody_token)
            assert r.status_code == 403, (method, template, r.status_code, r.text)
            body = r.json()
            assert body["error"] == "forbidden" and body["message"], body


def test_documented_reads_answer_for_an_admin(hub, served):
    for template, item in served["paths"].items():
        if "get" not in item or template == "/api/v1/events":
            continue                                   # the stream is read in test_fuzz
        r = _request(hub, "get", sample(template), hub.tokens["ada"])
        assert r.status_code != 405, (template, r.text)
        if r.status_code == 404:
            assert r.json()["message"] != "no such route", template
        else:
            assert r.status_code == 200, (template, r.status_code, r.text)


def test_unrouted_paths_answer_json_404(hub):
    r = _request(hub, "get", "/api/v1/no-such-resource", hub.tokens["alice"])
    assert r.status_code == 404
    assert r.json() == {"error": "not_found", "message": "no such route"}
    r = _request(hub, "post", "/api/v1/me", hub.tokens["alice"])
    assert r.status_code == 405
    assert r.json()["error"] == "method_not_allowed"


def _request(hub, method: str, path: str, token: str):
    import requests

    kw = {"json": {}} if method in ("post", "put", "patch") else {}
    return requests.request(method.upper(), hub.service_url + path, timeout=10,
                            headers={"Authorization": f"token {token}"}, **kw)


QUERY_READ = re.compile(r"""\b(?:get_query_arguments?|get_arguments?|query_float|query_int)\(\s*["'](\w+)["']""")
QUERY_INT = re.compile(r"""\bquery_int\(\s*["'](\w+)["']\s*,\s*[^,]+,\s*([\d_]+)\s*,\s*([\d_*]+)\s*\)""")


def _handler_source(cls: type, method: str) -> str:
    import inspect

    return inspect.getsource(getattr(cls, method))


def test_documented_query_parameters_are_the_ones_read(tmp_path):
    """Each operation documents exactly the query parameters its handler reads, and the bounds of
    integer ones are the handler's (a client built from the document gets no 400 it did not expect)."""
    doc = document(VERSION)
    checked = 0
    for template, (cls, methods) in api_routes(tmp_path).items():
        for method in methods:
            source = _handler_source(cls, method)
            read = set(QUERY_READ.findall(source))
            op = doc["paths"][template][method]
            params = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "query"}
            assert read == set(params), (f"{method.upper()} {template}: {cls.__name__} reads {sorted(read)}, "
                                         f"the document lists {sorted(params)}")
            for name, low, high in QUERY_INT.findall(source):
                schema = params[name]["schema"]
                assert (schema.get("minimum"), schema.get("maximum")) == (int(eval(low)), int(eval(high))), \
                    f"{method.upper()} {template} ?{name}: the handler takes {low}..{high}, the document {schema}"
            checked += bool(read)
    assert checked >= 5, "no handler reading query parameters was found"


def test_scopes_the_document_names_exist():
    """Scopes in the operations' descriptions are ComputeHub's custom scopes (or the hub's read:metrics)."""
    import json

    from hub_ext.scopes import CUSTOM_SCOPES, PREFIX, READ_METRICS

    text = json.dumps(document(VERSION))
    named = set(re.findall(r"custom:computehub:[a-z-]+", text))
    short = {PREFIX + s for s in re.findall(r"\b(submit-on-behalf|submit|team|nodes|admin)\b", text)}
    assert named, "the document names no scope"
    assert named <= set(CUSTOM_SCOPES), sorted(named - set(CUSTOM_SCOPES))
    assert short <= set(CUSTOM_SCOPES)
    assert READ_METRICS in text


def test_request_bodies_list_the_fields_the_service_takes():
    from hub_ext.api_workloads import SUBMIT_FIELDS
    from scheduler.model import PriorityClass, QueueSpec

    schemas = document(VERSION)["components"]["schemas"]
    for name, fields in (("Submit", set(SUBMIT_FIELDS)), ("PriorityClass", set(PriorityClass.__dataclass_fields__)),
                         ("Queue", set(QueueSpec.__dataclass_fields__)), ("NodeFlags", {"draining", "healthy"}),
                         ("Checkpoint", {"at", "on_stop"})):
        assert set(schemas[name]["properties"]) == fields, (name, sorted(set(schemas[name]["properties"]) ^ fields))


def test_the_service_guide_names_every_documented_path():
    """docs/service.md's tables name every path of the document (ids written as {id}, {name} or <id>)."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    norm = lambda t: re.sub(r"\{\w+\}|<\w+>", "{}", t.strip("/"))     # noqa: E731
    named = {norm(p) for p in re.findall(r"(?:api/v1/[\w/{}.-]+|serve/<id>/|metrics)", guide)}
    for template in document(VERSION)["paths"]:
        t = norm(template)
        assert t in named or (t.startswith("serve/") and "serve/{}" in named), f"{template} is not in docs/service.md"
