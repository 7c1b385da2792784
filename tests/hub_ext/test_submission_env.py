"""A submission may not set the container runtime's variables (``NVIDIA_*``) in its job's env.

Against a real hub, proxy and service (realhub.py); nothing is emulated. On Kubernetes a
pod's own ``NVIDIA_VISIBLE_DEVICES`` overrides the device plugin's, so ``all`` gave a job
every GPU of its node: refused at submission with a 400 that names the variable, and nothing
is queued. The names the launcher sets itself (``RANK``, ``CUDA_VISIBLE_DEVICES``, ...) stay
accepted: the launcher drops them, as docs/launchers.md says.
"""

from __future__ import annotations

import pytest

JOB = {"command": ["python", "train.py"], "workdir": "/home/alice"}


def total(hub, token) -> int:
    return hub.call("GET", "/workloads?user=alice", token).json()["total"]


@pytest.mark.parametrize("env", [{"NVIDIA_VISIBLE_DEVICES": "all"},
                                 {"PATH": "/usr/bin", "nvidia_driver_capabilities": "all"}])
def test_runtime_variables_are_refused_at_submission(hub, env):
    alice = hub.tokens["alice"]
    before = total(hub, alice)
    r = hub.call("POST", "/workloads", alice, json={
        "queue": "vision", "kind": "training", "resources": {"cpu": "100m"},
        "metadata": {"job": {**JOB, "env": env}}})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error"] == "invalid", body
    bad = next(k for k in env if k.upper().startswith("NVIDIA_"))
    assert bad in body["message"] and "remove them" in body["message"], body
    assert total(hub, alice) == before


def test_spawners_cannot_set_them_either(hub):
    ada = hub.tokens["ada"]         # an admin: may submit for others, still not this
    r = hub.call("POST", "/workloads", ada, json={
        "user": "alice", "queue": "vision", "kind": "training", "resources": {"cpu": "100m"},
        "metadata": {"job": {**JOB, "env": {"NVIDIA_VISIBLE_DEVICES": "0,1"}}}})
    assert r.status_code == 400 and "NVIDIA_VISIBLE_DEVICES" in r.json()["message"], r.text


def test_ordinary_and_launcher_set_names_are_accepted(hub):
    alice = hub.tokens["alice"]
    r = hub.call("POST", "/workloads", alice, json={
        "queue": "vision", "kind": "training", "resources": {"cpu": "100m"},
        "metadata": {"job": {**JOB, "env": {"PATH": "/opt/conda/bin:/usr/bin", "RANK": "5", "MY_NVIDIA": "x"}}}})
    assert r.status_code == 201, r.text
    hub.call("DELETE", f"/workloads/{r.json()['id']}", alice)
