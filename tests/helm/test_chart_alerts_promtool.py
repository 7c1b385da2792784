"""The chart's alerting rules run by Prometheus' own rule engine: ``promtool check rules`` and
``promtool test rules`` (from Debian's prometheus package; ``make test`` unpacks it into .venv).

Each alert gets series that a real scrape of the service would give (a healthy service, then one
thing going wrong) and is checked to fire when its condition has held for its ``for`` and not
before, with its labels and its annotations rendered as an on-call person reads them; and the
alerts of one cause stay quiet when another alert covers it (a service never scraped pages as
ServiceDown, not as a stalled scheduler or silent clients; a database that is down is not a
stalled scheduler). Emulated: the scraped series (written here, a sample a minute)."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from chart import PROMETHEUS_BIN, one, render

ON = ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
SEL = {"namespace": "jhub", "job": "t-computehub"}
INSTANCE = {"instance": "10.0.0.5:10101", "pod": "t-computehub-7d9f-x2x"}
ALERTS = ["ComputeHubServiceDown", "ComputeHubDatabaseUnavailable", "ComputeHubSchedulingStalled",
          "ComputeHubSchedulingCyclesFailing", "ComputeHubHubUnreachable", "ComputeHubGuaranteedWorkWaiting",
          "ComputeHubGPUsIdleWhileWorkWaits", "ComputeHubWorkNotStopping", "ComputeHubApprovalWaiting",
          "ComputeHubInventorySilent", "ComputeHubLauncherSilent", "ComputeHubMailFailing"]

# Two hours of a healthy service, a sample a minute: (metric, its own labels) -> promtool values.
# Timestamps follow time() (0 at the start), so "0+60x120" is "just now" at every sample.
HEALTHY = {
    ("up", ()): "1x120",
    ("computehub_database_up", ()): "1x120",
    ("computehub_scheduling_cycle_last_success_timestamp_seconds", ()): "0+60x120",
    ("computehub_scheduling_cycle_failures_total", (("reason", "error"),)): "0x120",
    ("computehub_scheduling_cycle_failures_total", (("reason", "database"),)): "0+1x120",
    ("computehub_unavailable_responses_total", (("error", "hub_unavailable"),)): "0x120",
    ("computehub_queue_owed_wait_seconds", (("queue", "vision"),)): "0x120",
    ("computehub_gpus_capacity", (("flavor", "all"),)): "16x120",
    ("computehub_gpus_allocated", (("flavor", "all"),)): "16x120",
    ("computehub_pending_gpus", (("queue", "vision"),)): "8x120",
    ("computehub_stop_overdue_gpus", (("queue", "vision"),)): "0x120",
    ("computehub_oldest_waiting_seconds", (("queue", "vision"), ("state", "awaiting_approval"))): "0x120",
    ("computehub_client_last_request_timestamp_seconds", (("client", "computehub-launcher"),)): "0+60x120",
    ("computehub_client_last_request_timestamp_seconds", (("client", "computehub-inventory"),)): "0+60x120",
    ("process_start_time_seconds", ()): "0x120",
    ("computehub_mail_backlog_seconds", ()): "0x120",
}


def series(changed: dict | None = None, only: set | None = None) -> list[dict]:
    """The healthy series with some replaced (a value of None: the series is missing)."""
    values = {**HEALTHY, **(changed or {})}
    out = []
    for (name, labels), v in values.items():
        if v is None or (only is not None and name not in only):
            continue
        body = ", ".join(f'{k}="{x}"' for k, x in {**SEL, **INSTANCE, **dict(labels)}.items())
        out.append({"series": f"{name}{{{body}}}", "values": v})
    return out


@pytest.fixture(scope="module")
def promtool():
    found = PROMETHEUS_BIN / "promtool"
    if not found.exists():
        pytest.fail(f"promtool is missing at {found}: `make test` unpacks it (Debian's prometheus)", pytrace=False)
    return str(found)


@pytest.fixture(scope="module")
def chart_rules(tmp_path_factory):
    """The rendered PrometheusRule's groups as a Prometheus rules file, and its alerts by name."""
    tmp = tmp_path_factory.mktemp("rules")
    spec = one(render(tmp, *ON), "PrometheusRule")["spec"]
    (tmp / "rules.yaml").write_text(yaml.safe_dump(spec))
    return tmp / "rules.yaml", {r["alert"]: r for g in spec["groups"] for r in g["rules"]}


def annotations(rule: dict, **values: str) -> dict:
    """The rule's annotations as Prometheus renders them for an alert with these values."""
    out = {}
    for key, text in rule["annotations"].items():
        for template, value in (("{{ $value | humanizeDuration }}", values.get("duration")),
                                ("{{ $value | humanize }}", values.get("value")),
                                ("{{ $value }}", values.get("value")),
                                ("{{ $labels.queue }}", values.get("queue"))):
            if template in text:
                assert value is not None, (rule["alert"], template)
                text = text.replace(template, value)
        out[key] = text
    return out


def check(alert: str, rules: dict, at: str, labels: dict | None = None, **values) -> dict:
    """One alert_rule_test: at ``at``, ``alert`` is quiet (labels None) or fires once with
    these labels (its severity added) and its annotations rendered with ``values``."""
    if labels is None:
        return {"eval_time": at, "alertname": alert, "exp_alerts": []}
    rule = rules[alert]
    return {"eval_time": at, "alertname": alert, "exp_alerts": [
        {"exp_labels": {"severity": rule["labels"]["severity"], **labels},
         "exp_annotations": annotations(rule, **values)}]}


def run_tests(promtool, rules_file, tmp_path, tests: list[dict]) -> None:
    f = tmp_path / "alerts_test.yaml"
    f.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}))
    out = subprocess.run([promtool, "test", "rules", str(f)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout, out.stdout


def test_promtool_accepts_the_rules(promtool, chart_rules):
    rules_file, rules = chart_rules
    out = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout, out.stdout
    assert sorted(rules) == sorted(ALERTS)


def test_a_healthy_service_raises_no_alert(promtool, chart_rules, tmp_path):
    rules_file, rules = chart_rules
    quiet = [check(a, rules, at) for at in ("10m", "60m", "119m") for a in ALERTS]
    run_tests(promtool, rules_file, tmp_path, [{"interval": "1m", "input_series": series(), "alert_rule_test": quiet}])


def test_the_service_and_its_database(promtool, chart_rules, tmp_path):
    rules_file, rules = chart_rules
    stalled_at_600 = "0+60x10 600x60"          # the last successful cycle: at 10 min
    tests = [
        # The scrape fails from minute 11: ServiceDown after its 5 minutes.
        {"interval": "1m", "input_series": series({("up", ()): "1x10 0x60"}),
         "alert_rule_test": [check("ComputeHubServiceDown", rules, "15m"),
                             check("ComputeHubServiceDown", rules, "17m", {**SEL, **INSTANCE})]},
        # Never scraped at all (no series): ServiceDown, and none of the alerts it explains.
        {"interval": "1m", "input_series": [{"series": 'unrelated{job="other"}', "values": "1x60"}],
         "alert_rule_test": [check("ComputeHubServiceDown", rules, "4m"),
                             check("ComputeHubServiceDown", rules, "6m", SEL),
                             *[check(a, rules, "45m") for a in ALERTS[1:]]]},
        # The database goes away at minute 11 (cycles stop succeeding too): DatabaseUnavailable,
        # not a stalled scheduler.
        {"interval": "1m", "input_series": series({
            ("computehub_database_up", ()): "1x10 0x60",
            ("computehub_scheduling_cycle_last_success_timestamp_seconds", ()): stalled_at_600}),
         "alert_rule_test": [check("ComputeHubDatabaseUnavailable", rules, "12m"),
                             check("ComputeHubDatabaseUnavailable", rules, "14m", {}),
                             check("ComputeHubSchedulingStalled", rules, "40m")]},
        # Cycles stop succeeding with the database up: stalled from 120 s after the last
        # success (minute 13), alerting 3 minutes later.
        {"interval": "1m", "input_series": series({
            ("computehub_scheduling_cycle_last_success_timestamp_seconds", ()): stalled_at_600}),
         "alert_rule_test": [check("ComputeHubSchedulingStalled", rules, "15m"),
                             check("ComputeHubSchedulingStalled", rules, "17m", {}),
                             check("ComputeHubDatabaseUnavailable", rules, "17m")]},
        # Scraped, but no cycle has ever succeeded.
        {"interval": "1m", "input_series": series({
            ("computehub_scheduling_cycle_last_success_timestamp_seconds", ()): None}),
         "alert_rule_test": [check("ComputeHubSchedulingStalled", rules, "2m"),
                             check("ComputeHubSchedulingStalled", rules, "4m", SEL)]},     # absent()'s labels
        # Three cycles fail with an error at minute 11: a warning while they are within the last
        # 15 minutes (cycles failing for want of the database, counted all along, never alert).
        {"interval": "1m", "input_series": series({
            ("computehub_scheduling_cycle_failures_total", (("reason", "error"),)): "0x10 3x60"}),
         "alert_rule_test": [check("ComputeHubSchedulingCyclesFailing", rules, "11m"),
                             check("ComputeHubSchedulingCyclesFailing", rules, "20m", {}, value="3"),
                             check("ComputeHubSchedulingCyclesFailing", rules, "28m")]},
        # Five requests answered 503 hub_unavailable at minute 11.
        {"interval": "1m", "input_series": series({
            ("computehub_unavailable_responses_total", (("error", "hub_unavailable"),)): "0x10 5x60"}),
         "alert_rule_test": [check("ComputeHubHubUnreachable", rules, "12m"),
                             check("ComputeHubHubUnreachable", rules, "14m", {}, value="5"),
                             check("ComputeHubHubUnreachable", rules, "18m")]},
    ]
    run_tests(promtool, rules_file, tmp_path, tests)


def test_the_work_and_the_clients(promtool, chart_rules, tmp_path):
    rules_file, rules = chart_rules
    vision = {"queue": "vision"}
    tests = [
        # Owed work waits from minute 11; past 1,800 s at minute 42, alerting 10 minutes later.
        {"interval": "1m", "input_series": series({
            ("computehub_queue_owed_wait_seconds", (("queue", "vision"),)): "0x10 0+60x60"}),
         "alert_rule_test": [check("ComputeHubGuaranteedWorkWaiting", rules, "50m"),
                             check("ComputeHubGuaranteedWorkWaiting", rules, "53m", vision,
                                   queue="vision", duration="42m 0s")]},
        # Four GPUs idle from minute 11 while 8 GPUs of work wait: after 30 minutes.
        {"interval": "1m", "input_series": series({
            ("computehub_gpus_allocated", (("flavor", "all"),)): "16x10 12x60"}),
         "alert_rule_test": [check("ComputeHubGPUsIdleWhileWorkWaits", rules, "40m"),
                             check("ComputeHubGPUsIdleWhileWorkWaits", rules, "42m", {}, value="4")]},
        # ... but idle GPUs with nothing waiting are no alert.
        {"interval": "1m", "input_series": series({
            ("computehub_gpus_allocated", (("flavor", "all"),)): "16x10 12x60",
            ("computehub_pending_gpus", (("queue", "vision"),)): "0x70"}),
         "alert_rule_test": [check("ComputeHubGPUsIdleWhileWorkWaits", rules, "60m")]},
        # Four GPUs held by work told to stop and overdue from minute 11.
        {"interval": "1m", "input_series": series({
            ("computehub_stop_overdue_gpus", (("queue", "vision"),)): "0x10 4x60"}),
         "alert_rule_test": [check("ComputeHubWorkNotStopping", rules, "15m"),
                             check("ComputeHubWorkNotStopping", rules, "17m", vision, value="4", queue="vision")]},
        # The launcher's last call at minute 10: silent past 300 s from minute 16, alerting at 21.
        {"interval": "1m", "input_series": series({
            ("computehub_client_last_request_timestamp_seconds", (("client", "computehub-launcher"),)):
                "0+60x10 600x60"}),
         "alert_rule_test": [check("ComputeHubLauncherSilent", rules, "20m"),
                             check("ComputeHubLauncherSilent", rules, "22m", {}),
                             check("ComputeHubInventorySilent", rules, "22m")]},
        # An inventory that never called a service started at 0: silent from 5 min, alerting at 10.
        {"interval": "1m", "input_series": series({
            ("computehub_client_last_request_timestamp_seconds", (("client", "computehub-inventory"),)): None}),
         "alert_rule_test": [check("ComputeHubInventorySilent", rules, "9m"),
                             check("ComputeHubInventorySilent", rules, "11m",
                                   {**SEL, "client": "computehub-inventory"}),
                             check("ComputeHubLauncherSilent", rules, "11m")]},
    ]
    run_tests(promtool, rules_file, tmp_path, tests)


def test_a_request_awaiting_approval_for_a_day(promtool, chart_rules, tmp_path):
    """An info alert, without a ``for``: as soon as the oldest request has waited a day."""
    rules_file, rules = chart_rules
    waiting = ("computehub_oldest_waiting_seconds", (("queue", "vision"), ("state", "awaiting_approval")))
    hourly = [s for s in series({waiting: "0+3600x30"}, only={waiting[0]})]
    run_tests(promtool, rules_file, tmp_path, [{"interval": "1h", "input_series": hourly, "alert_rule_test": [
        check("ComputeHubApprovalWaiting", rules, "24h"),
        check("ComputeHubApprovalWaiting", rules, "25h", {"queue": "vision"}, queue="vision",
              duration="1d 1h 0m 0s")]}])


def test_mail_waiting_for_its_server(promtool, chart_rules, tmp_path):
    """A warning once the oldest unsent mail has waited half an hour (no ``for``: the gauge is a
    duration already); a scrape that lacks the series raises nothing."""
    rules_file, rules = chart_rules
    backlog = ("computehub_mail_backlog_seconds", ())
    waiting = series({backlog: "0x10 60+60x60"}, only={backlog[0]})
    run_tests(promtool, rules_file, tmp_path, [
        {"interval": "1m", "input_series": waiting, "alert_rule_test": [
            check("ComputeHubMailFailing", rules, "20m"),
            check("ComputeHubMailFailing", rules, "40m"),                    # 1,800 s: not yet
            check("ComputeHubMailFailing", rules, "45m", {}, duration="35m 0s")]},
        {"interval": "1m", "input_series": series({backlog: None}), "alert_rule_test": [
            check("ComputeHubMailFailing", rules, "60m")]}])
