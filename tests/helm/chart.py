"""The chart rendered by the real helm binary (``make test`` installs it into .venv/helm)."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "computehub"
HELM = ROOT / ".venv" / "helm" / "helm"
PROMETHEUS_BIN = ROOT / ".venv" / "prometheus" / "usr" / "bin"      # promtool and prometheus (make test)
NAMESPACE = "jhub"


def helm(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    if not HELM.exists():
        raise RuntimeError(f"helm is missing at {HELM}: run 'make test' (it installs it)")
    env = dict(os.environ, HELM_CACHE_HOME=str(tmp / "cache"), HELM_CONFIG_HOME=str(tmp / "config"),
               HELM_DATA_HOME=str(tmp / "data"))
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, env=env, timeout=120)


def render(tmp: Path, *sets: str, release: str = "t", values: dict | None = None) -> list[dict]:
    """``helm template`` with ``--set`` pairs (and a values file); the objects, in order."""
    args = ["template", release, str(CHART), "--namespace", NAMESPACE]
    for s in sets:
        args += ["--set", s]
    if values is not None:
        f = tmp / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        args += ["-f", str(f)]
    out = helm(*args, tmp=tmp)
    if out.returncode != 0:
        raise ChartError(out.stderr.strip())
    return [d for d in yaml.safe_load_all(out.stdout) if d]


class ChartError(Exception):
    """helm refused to render (the values or the chart are wrong): its message."""


def one(objs: list[dict], kind: str, name: str | None = None, component: str | None = None) -> dict:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
             and (component is None or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component)]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name!r} / component {component!r}"
    return found[0]


def secret_data(objs: list[dict]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in one(objs, "Secret")["data"].items()}


def pod_spec(obj: dict) -> dict:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def z2jh_values(tmp: Path, *sets: str, release: str = "t") -> dict:
    """The z2jh values the chart's NOTES tell users to merge (``helm install --dry-run``), parsed."""
    import re
    args = ["install", release, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for s in sets:
        args += ["--set", s]
    out = helm(*args, tmp=tmp)
    if out.returncode != 0:
        raise ChartError(out.stderr.strip())
    notes = out.stdout.split("NOTES:", 1)[1]
    return yaml.safe_load(re.search(r"^hub:\n.*?(?=\n\n)", notes, re.S | re.M).group(0))
