"""Run the container of a rendered Deployment (or Pod) as a local process: its command, its environment
(secrets resolved from the rendered Secret), its mounts (the ConfigMap's files, emptyDirs and
Secret files) as folders under a work folder. What a cluster would provide is swapped at the
narrowest point, by the caller: the cluster's DNS names (``hosts``: name → 127.0.0.1:port) and
the pod's service account (a kubeconfig, set by ``config`` in the pod's config file)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from chart import one, pod_spec, secret_data


def container_process(objs: list[dict], component: str, workdir: Path, *, hosts: dict[str, str],
                      config: dict | None = None) -> subprocess.Popen:
    """``config``: {file name: {class: {setting: value}}} merged into that JSON config file."""
    kind = "Pod" if any(o["kind"] == "Pod" and o["metadata"]["labels"].get("app.kubernetes.io/component") == component
                        for o in objs) else "Deployment"
    spec = pod_spec(one(objs, kind, component=component))
    container = spec["containers"][0]
    secrets = secret_data(objs)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    root = workdir / component
    # Each path the pod mounts becomes a folder (or file) under root; one mounted inside another
    # (the cookie secret's file in the data folder) lands inside that one's folder.
    mounts = sorted(container.get("volumeMounts", []), key=lambda m: len(m["mountPath"]))
    paths: dict[str, str] = {}
    for m in mounts:
        p = m["mountPath"]
        parent = max((q for q in paths if p.startswith(q + "/")), key=len, default=None)
        paths[p] = paths[parent] + p[len(parent):] if parent else str(root / p.strip("/").replace("/", "_"))
    # One pass, longest first, whole path components only: a replaced path is not rescanned.
    mounted = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, sorted(paths, key=len, reverse=True)))
                         + r")(?![\w.-])")

    def local(text: str, names: bool = True) -> str:
        text = mounted.sub(lambda m: paths[m.group(1)], text)
        for name, where in (hosts.items() if names else ()):
            text = text.replace(name, where)
        return text

    for m in mounts:
        here, vol = Path(paths[m["mountPath"]]), volumes[m["name"]]
        if "configMap" in vol:
            here.mkdir(parents=True, exist_ok=True)
            for key, text in one(objs, "ConfigMap", name=vol["configMap"]["name"])["data"].items():
                text = local(text, names=False)     # config files name mount paths (data_dir)
                if key in (config or {}):
                    d = json.loads(text)
                    for cls, settings in config[key].items():
                        d.setdefault(cls, {}).update(settings)
                    text = json.dumps(d)
                (here / key).write_text(text)       # what jobs are told (their URL) stays as rendered
        elif "secret" in vol:
            here.parent.mkdir(parents=True, exist_ok=True)
            here.write_text(secrets[m["subPath"]])
        else:
            here.mkdir(parents=True, exist_ok=True)

    env = {}
    for e in container.get("env", []):
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        env[e["name"]] = local(secrets[ref["key"]] if ref else e["value"])
    command = [local(re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a)) for a in container["command"]]
    exe = Path(sys.executable).parent / command[0]
    log = open(workdir / f"{component}.log", "ab")
    return subprocess.Popen([str(exe), *command[1:]], env=dict(os.environ, **env), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
