"""The chart's alerting rules (a Prometheus Operator PrometheusRule), rendered by the real helm,
and its Grafana dashboard.

kubernetes-validate knows no custom resources: the structure the Prometheus Operator reads is
checked here, and every expression is parsed as PromQL (tests/helm/promql.py). That the
metrics they read are the ones the service serves is checked against a real scrape of the
chart's service in test_chart_hub.py."""

from __future__ import annotations

import json
import re

import pytest
from chart import CHART, ChartError, one, render
from promql import PROMETHEUS_OWN, metric_names, selectors, served_names

ON = ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d)$")


def rules(objs) -> list[dict]:
    rule = one(objs, "PrometheusRule")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_no_rules_unless_asked_for(tmp_path):
    assert not [o for o in render(tmp_path, "metrics.serviceMonitor.enabled=true") if o["kind"] == "PrometheusRule"]


def test_every_alert_is_well_formed_and_reads_only_this_releases_series(tmp_path):
    objs = render(tmp_path, *ON, "metrics.prometheusRule.labels.release=kube-prometheus-stack")
    rule = one(objs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == "t-computehub"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert set(rule["spec"]) == {"groups"} and [set(g) for g in rule["spec"]["groups"]] == [{"name", "rules"}]
    alerts = rules(objs)
    names = [r["alert"] for r in alerts]
    assert len(names) == len(set(names)) and set(names) >= {
        "ComputeHubServiceDown", "ComputeHubDatabaseUnavailable", "ComputeHubSchedulingStalled",
        "ComputeHubHubUnreachable", "ComputeHubGuaranteedWorkWaiting", "ComputeHubGPUsIdleWhileWorkWaits",
        "ComputeHubLauncherSilent", "ComputeHubInventorySilent", "ComputeHubApprovalWaiting",
        "ComputeHubSchedulingCyclesFailing"}, names
    for r in alerts:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
        assert re.fullmatch(r"ComputeHub[A-Za-z]+", r["alert"])
        assert DURATION.match(r.get("for", "0s")), r
        assert r["labels"]["severity"] in ("critical", "warning", "info")
        assert r["annotations"]["summary"].strip() and len(r["annotations"]["description"]) > 40, r
        found = selectors(r["expr"])                      # PromQL, or ValueError
        assert found, r["expr"]
        for name, eq in found:
            assert name.startswith("computehub_") or name in PROMETHEUS_OWN or name == "process_start_time_seconds"
            assert eq.get("namespace") == "jhub" and eq.get("job") == "t-computehub", (r["alert"], name, eq)
        # Prometheus templates may name only labels the expression keeps.
        for label in re.findall(r"\$labels\.(\w+)", str(r["annotations"])):
            assert f"by ({label})" in r["expr"], (r["alert"], label)
        assert "{{ $labels" not in r["expr"] and "<no value>" not in str(r)


def test_the_values_shape_the_rules(tmp_path):
    objs = render(tmp_path, *ON, "launcher.enabled=false", "metrics.prometheusRule.owedWaitSeconds=600",
                  "metrics.prometheusRule.for.databaseDown=30s", "hub.serviceName=gpus")
    by = {r["alert"]: r for r in rules(objs)}
    assert "ComputeHubLauncherSilent" not in by
    assert 'client="gpus-inventory"' in by["ComputeHubInventorySilent"]["expr"]
    assert by["ComputeHubGuaranteedWorkWaiting"]["expr"].rstrip().endswith("> 600")
    assert by["ComputeHubDatabaseUnavailable"]["for"] == "30s"
    # Scraped by a job of one's own instead of the ServiceMonitor:
    objs = render(tmp_path, "metrics.prometheusRule.enabled=true", 'metrics.prometheusRule.selector=job="ch"')
    for r in rules(objs):
        assert all(eq.get("job") == "ch" and "namespace" not in eq for _, eq in selectors(r["expr"])), r["expr"]


def test_the_alerts_read_what_a_real_service_serves(tmp_path):
    """Every metric an alert reads is one the service serves (a ComputeHubService in-process, on
    SQLite, after one cycle; test_chart_hub.py scrapes the chart's own service too), and failing
    cycles alert only for errors: the database being away has its own alert."""
    from prometheus_client import generate_latest

    from hub_ext.app import ComputeHubService
    svc = ComputeHubService(data_dir=str(tmp_path / "data"), service_prefix="/services/computehub/",
                            nodes=[{"name": "n0", "gpus": 8}], initial_queues=[{"name": "a"}])
    svc.initialize([])
    try:
        svc.run_cycle()
        served = served_names(generate_latest(svc.metrics.registry).decode())
    finally:
        svc.sched.store.close()
    alerts = rules(render(tmp_path, *ON))
    read = {m for r in alerts for m in metric_names(r["expr"])} - PROMETHEUS_OWN
    assert read <= served, read - served
    by = {r["alert"]: r for r in alerts}
    failing = by["ComputeHubSchedulingCyclesFailing"]
    assert [(n, eq["reason"]) for n, eq in selectors(failing["expr"])] == [
        ("computehub_scheduling_cycle_failures_total", "error")]
    assert failing["for"] == "1m" and failing["labels"]["severity"] == "warning"
    assert "traceback" in failing["annotations"]["description"]


@pytest.mark.parametrize("sets, message", [
    (["metrics.prometheusRule.enabled=true"], "metrics.prometheusRule reads the series metrics.serviceMonitor"),
    ([*ON, "metrics.prometheusRule.for.serviceDown=5 minutes"], "/metrics/prometheusRule/for/serviceDown"),
    ([*ON, "metrics.prometheusRule.owedWaitSeconds=0"], "/metrics/prometheusRule/owedWaitSeconds"),
    ([*ON, "metrics.prometheusRule.severity=page"], "additional properties 'severity' not allowed"),
])
def test_bad_rule_values_are_refused(tmp_path, sets, message):
    with pytest.raises(ChartError) as e:
        render(tmp_path, *sets)
    assert message in str(e.value)


def test_every_dashboard_panel_is_a_prometheus_query_in_its_own_place():
    """Panels query the dashboard's datasource with PromQL; none overlaps another. (That each
    metric is served: test_chart_hub.py scrapes the chart's service.)"""
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and len({t["refId"] for t in p["targets"]}) == len(p["targets"])
        for t in p["targets"]:
            assert metric_names(t["expr"]), (p["title"], t["expr"])        # PromQL, or ValueError
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
    titles = " ".join(p["title"] for p in panels)
    for what in ("Database up", "scheduling cycle", "client", "503", "reason", "wait", "Idle GPUs", "queue",
                 "Nodes", "approval"):
        assert what in titles, what
