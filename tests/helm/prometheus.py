"""A real Prometheus server (Debian's prometheus package; ``make test`` unpacks it) scraping
what a ServiceMonitor names and evaluating a PrometheusRule's groups.

The Prometheus Operator is what turns those two custom resources into Prometheus' own
configuration in a cluster; here that translation is written out (``scrape_config``) the way the
Operator does it for one endpoint: the job label is the Service's name, the namespace label the
release's namespace, the bearer token the Secret's key."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml
from chart import PROMETHEUS_BIN


def scrape_config(monitor: dict, service: dict, namespace: str, token: str, target: str, tmp: Path) -> dict:
    """What the Operator generates from the ServiceMonitor's first endpoint for ``service`` (in
    ``namespace``), whose pod listens at ``target`` (host:port)."""
    endpoint = monitor["spec"]["endpoints"][0]
    assert any(p["name"] == endpoint["port"] for p in service["spec"]["ports"]), endpoint["port"]
    (tmp / "scrape-token").write_text(token)
    return {"job_name": service["metadata"]["name"], "metrics_path": endpoint["path"],
            "authorization": {"type": endpoint["authorization"]["type"],
                              "credentials_file": str(tmp / "scrape-token")},
            "static_configs": [{"targets": [target], "labels": {"namespace": namespace}}]}


class Prometheus:
    def __init__(self, tmp: Path, scrape: dict, groups: list[dict], port: int, every: str = "1s"):
        binary = PROMETHEUS_BIN / "prometheus"
        if not binary.exists():
            pytest.fail(f"prometheus is missing at {binary}: `make test` unpacks it (Debian's prometheus)",
                        pytrace=False)
        (tmp / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
        (tmp / "prometheus.yaml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": every, "evaluation_interval": every},
            "rule_files": [str(tmp / "rules.yaml")], "scrape_configs": [scrape]}))
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yaml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(self.url + "/-/ready", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def api(self, path: str, **params) -> dict:
        r = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    def rules(self) -> list[dict]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def firing(self) -> dict[str, dict]:
        return {a["labels"]["alertname"]: a for a in self.api("alerts")["alerts"] if a["state"] == "firing"}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
