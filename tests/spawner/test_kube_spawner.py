"""QueuedKubeSpawner end to end (issue 4): a real hub spawning notebook pods through the queue.

Real: JupyterHub + configurable-http-proxy + the ComputeHub service (RealHub),
the QueuedKubeSpawner inside the hub, kubespawner and kubernetes_asyncio talking
HTTP through a kubeconfig, and the notebook servers themselves (the pods'
command, jupyterhub-singleuser, run as local processes with the pods' env).
Emulated: the Kubernetes API (kmock, tests/spawner/kmock_cluster.py) and the
kubelet (the test runs each pod's command on a loopback pod IP and reports it
Running), and the GPU node (a declared node "kube-gpu-1" with one A100); the hub is
tests/spawner/kube_hubs.py's ``spawner_hub``.
Every manifest the spawner creates is validated with kubernetes-validate
--strict against a pinned, bundled Kubernetes version.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import requests
from kubernetes_validate.utils import all_versions, validate

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from kube_hubs import (hub_api, newest_workload, server, spawn, spawner_hub, stop, user_pods, wait_for,  # noqa: E402
                       wait_ready, workload)
from kube_profiles import A100, K8S_VERSION, notebook  # noqa: E402


@pytest.fixture(scope="module")
def khub(tmp_path_factory):
    with spawner_hub(tmp_path_factory.mktemp("khub")) as hub:
        yield hub


def env_of(pod: dict) -> dict:
    return {e["name"]: e.get("value") for e in notebook(pod).get("env") or []}


def assert_manifests_valid(hub):
    assert K8S_VERSION in all_versions(), f"kubernetes-validate bundles no schema for {K8S_VERSION}"
    created = hub.cluster.created()
    assert created, "no manifest was created"
    for manifest in created:
        validate(manifest, K8S_VERSION, strict=True)    # raises ValidationError with the path


def refusal(hub, user, options) -> str:
    """The message a refused spawn gives: the POST's 400, or, when the refusal comes after
    slow_spawn_timeout (a loaded machine), the failure at the end of the progress stream."""
    r = hub_api(hub, "POST", f"/users/{user}/server", user, json=options)
    if r.status_code == 400:
        message = r.json()["message"]
    else:
        assert r.status_code == 202, r.text
        message = ""
        with hub_api(hub, "GET", f"/users/{user}/server/progress", user, stream=True, timeout=120) as s:
            for line in s.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    ev = json.loads(line[5:])
                    if ev.get("failed"):
                        message = ev["message"]
                        break
    wait_for(f"{user}'s failed spawn to settle", lambda: not (server(hub, user) or {}).get("pending"), 60)
    return message


def test_gpu_pod_placement_queue_cancel_and_no_leak(khub):
    hub = khub
    # alice takes the only GPU: her pod is bound to the node ComputeHub chose.
    spawn(hub, "alice", {"profile": "a100", "image": "torch"})
    wait_ready(hub, "alice")
    wa = newest_workload(hub, "alice")
    assert wa["state"] == "running" and wa["placement"][0]["node"] == "kube-gpu-1", wa
    assert wa["resources"]["gpu"] == 1 and wa["gpu_model"] == "a100", wa
    [pod] = user_pods(hub, "alice")
    assert pod["spec"]["nodeName"] == "kube-gpu-1"
    assert notebook(pod)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert notebook(pod)["image"].startswith("quay.io/jupyter/pytorch-notebook")
    assert pod["spec"]["priorityClassName"] == "computehub-interactive"
    labels = pod["metadata"]["labels"]
    assert labels["computehub/workload"] == wa["id"]
    assert labels["computehub/user"] == "alice" and labels["computehub/queue"] == "vision"
    assert pod["metadata"]["annotations"]["computehub/user"] == "alice"     # what the launcher checks
    env = env_of(pod)
    assert env["COMPUTEHUB_WORKLOAD_ID"] == wa["id"] and env["COMPUTEHUB_URL"].endswith("/services/computehub")
    assert "CUDA_VISIBLE_DEVICES" not in env        # the device plugin exposes the GPU inside the pod
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": A100}

    # bob asks for a GPU while it is busy: queued, and no pod of his exists.
    spawn(hub, "bob", {"profile": "a100"})
    wb = wait_for("bob's workload", lambda: newest_workload(hub, "bob"), 30)
    wait_for("bob to be queued", lambda: workload(hub, wb["id"])["state"] == "pending", 30)
    assert (server(hub, "bob") or {}).get("pending") == "spawn"
    assert user_pods(hub, "bob") == []

    # lin queues too, then cancels: the workload is withdrawn, no pod ever existed.
    spawn(hub, "lin", {"profile": "a100"})
    wl = wait_for("lin's workload", lambda: newest_workload(hub, "lin"), 30)
    wait_for("lin to be queued", lambda: workload(hub, wl["id"])["state"] == "pending", 30)
    r = hub_api(hub, "DELETE", "/users/lin/server", "lin")
    assert r.status_code in (202, 204), r.text
    wait_for("lin's workload withdrawn", lambda: workload(hub, wl["id"])["state"] == "cancelled", 60)
    assert user_pods(hub, "lin") == []
    assert user_pods(hub, "bob") == []           # still waiting for alice's GPU

    # alice stops: her pod goes, the GPU is released, and bob's pod is created and starts.
    stop(hub, "alice")
    assert user_pods(hub, "alice") == []
    wait_for("alice's workload to finish", lambda: workload(hub, wa["id"])["state"] == "finished", 30)
    wait_ready(hub, "bob")
    [bpod] = user_pods(hub, "bob")
    assert bpod["spec"]["nodeName"] == "kube-gpu-1"
    assert notebook(bpod)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert notebook(bpod)["image"].startswith("quay.io/jupyter/pytorch-notebook")   # the default choice

    # alice switches to the CPU profile: nothing of the GPU profile stays on her (same spawner object).
    spawn(hub, "alice", {"profile": "cpu"})
    wait_ready(hub, "alice")
    wa2 = newest_workload(hub, "alice")
    assert wa2["id"] != wa["id"] and wa2["resources"].get("gpu", 0) == 0 and not wa2.get("gpu_model"), wa2
    [pod2] = user_pods(hub, "alice")
    for field in ("limits", "requests"):
        assert "nvidia.com/gpu" not in (notebook(pod2)["resources"].get(field) or {}), pod2
    assert float(notebook(pod2)["resources"]["limits"]["cpu"]) == 1
    assert not pod2["spec"].get("nodeSelector") and not pod2["spec"].get("tolerations"), pod2["spec"]
    assert notebook(pod2)["image"] == "quay.io/jupyter/base-notebook:2025-01-06"

    stop(hub, "alice")
    stop(hub, "bob")
    pvcs = hub.cluster.created("persistentvolumeclaims")
    assert {p["metadata"]["name"] for p in pvcs} >= {"claim-alice", "claim-bob"}
    assert_manifests_valid(hub)
    hub.cluster.check()


BAD_OPTIONS = [
    ({"profile": "gpu-for-free"}, "no profile 'gpu-for-free'; offered: a100, cpu, debug"),
    ({"profile": "a100", "image": "evil/miner:latest"}, "image must be one of tf, torch; got 'evil/miner:latest'"),
    ({"profile": "a100", "image--unlisted-choice": "evil/miner"}, "image: free-form values are not offered"),
    ({"profile": "cpu", "node_selector": {"kubernetes.io/hostname": "kube-gpu-1"}}, "unknown server option(s) node_selector"),
    ({"profile": "cpu", "privileged": True}, "unknown server option(s) privileged"),
    ({"queue": "vision"}, "queue 'vision' is not open to you; yours: nlp"),
]


@pytest.mark.parametrize("options,message", BAD_OPTIONS)
def test_bad_options_refused_with_a_clear_message(khub, options, message):
    assert message in refusal(khub, "carol", options)
    assert user_pods(khub, "carol") == []


def test_spawn_form_shows_the_refusal(khub):
    """The hub's own spawn form, posted as a browser would, answers 400 and shows the reason."""
    s = requests.Session()
    page = s.get(f"{khub.url}/hub/login", timeout=30).text
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)
    r = s.post(f"{khub.url}/hub/login", data={"username": "carol", "password": "pw", "_xsrf": xsrf}, timeout=30)
    assert r.status_code == 200, r.status_code
    form = s.get(f"{khub.url}/hub/spawn", timeout=30)
    assert 'value="a100"' in form.text          # KubeSpawner's profile form is what is offered
    xsrf = s.cookies.get("_xsrf") or xsrf
    r = s.post(f"{khub.url}/hub/spawn", data={"profile": "a100", "profile-option-a100--image": "evil", "_xsrf": xsrf},
               timeout=30)
    assert r.status_code == 400, r.status_code
    assert "image must be one of tf, torch; got &#39;evil&#39;" in r.text or "got 'evil'" in r.text, r.text[-3000:]
    assert user_pods(khub, "carol") == []
    wait_for("carol's failed spawn to settle", lambda: not (server(khub, "carol") or {}).get("pending"), 60)


def test_pod_guard_refuses_a_privileged_profile(khub):
    """An admin's profile that would run privileged: admitted, but no pod is created, and the
    workload is withdrawn; the spawn fails with the guard's message."""
    before = len(khub.cluster.created("pods"))
    message = refusal(khub, "carol", {"profile": "debug"})
    assert "refused: container 'notebook' would run privileged; no admin allowed it" in message
    w = newest_workload(khub, "carol")
    assert w["metadata"].get("profile") == "debug", w
    wait_for("the workload withdrawn", lambda: workload(khub, w["id"])["state"] == "cancelled", 30)
    assert len(khub.cluster.created("pods")) == before
