"""What the Kubernetes launcher's hub tests (test_launch_kube.py) do to the service and read back."""

from __future__ import annotations

NS = "hub"


def submit(hub, user, job, kind="training", gpus=1, workers=1, **more):
    body = {"kind": kind, "queue": "vision", "resources": {"gpu": gpus, "cpu": 4, "memory": "16Gi"},
            "workers": workers, "gpu_model": "a100", "metadata": {"job": job}, **more}
    r = hub.call("POST", "/workloads", hub.tokens[user], json=body)
    assert r.status_code == 201, r.text
    return r.json()


def get(hub, wid):
    r = hub.call("GET", f"/workloads/{wid}", hub.tokens["ada"])
    assert r.status_code == 200, r.text
    return r.json()


def state_is(hub, wid, *states):
    w = get(hub, wid)
    return w if w["state"] in states else None


def one(hub, plural, wid):
    objs = [o for o in hub.cluster.objects(plural, NS) if o["metadata"]["labels"].get("computehub/workload") == wid]
    return objs[0] if len(objs) == 1 else None


def env_of(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}
