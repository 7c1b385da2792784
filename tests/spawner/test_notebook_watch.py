"""Idle GPU notebooks are reclaimed; a hub restart leaks nothing (issue 4).

A real JupyterHub + proxy + the ComputeHub service + the managed
``computehub-notebooks`` watcher (spawner/notebook_watch.py), and real
single-user servers started by QueuedSimpleLocalProcessSpawner. Emulated: the
one GPU (a declared simulated node, "local"); GPU utilisation is therefore
unknown here and idleness comes from the hub's activity data alone (the NVML
side is tested in test_gpu_usage.py).
"""

from __future__ import annotations


import pytest

from localhub import RealHub, hub_api, kill_servers, server_procs, spawner_config, wait_for

IDLE_SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "local", "gpus": 1, "gpu_model": "sim", "cpu": 8, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 1}, "groups": ["vision"],
     "idle": {"warn_after": 4, "release_after": 9}},
]
"""


def workloads(hub, user, *states):
    q = "&".join(f"state={s}" for s in states)
    r = hub.call("GET", f"/workloads?user={user}&kind=notebook&{q}", hub.tokens["ada"])
    assert r.status_code == 200, r.text
    return r.json()["workloads"]


def start_server(hub, user):
    r = hub_api(hub, "POST", f"/users/{user}/server", user)
    assert r.status_code in (201, 202), r.text


def server_ready(hub, user) -> bool:
    r = hub_api(hub, "GET", f"/users/{user}", user)
    s = (r.json().get("servers") or {}).get("")
    return bool(s and s.get("ready"))


@pytest.mark.slow
def test_idle_notebook_is_warned_then_reclaimed_and_restarted_without_gpu(tmp_path):
    hub = RealHub(tmp_path, extra_service_config=IDLE_SERVICE,
                  configure_kwargs='notebook_watch={"interval": 0.5, "restart_without_gpu": True}')
    hub.spawner_config = spawner_config(hub)
    with hub:
        start_server(hub, "alice")
        wait_for("alice's server to start", lambda: server_ready(hub, "alice"), 90)
        [w] = workloads(hub, "alice", "running")
        assert w["resources"].get("gpu") == 1 and w["placement"][0]["gpus"] == [0]

        # Nobody uses it: the watcher reports idleness, the queue's policy warns the owner ...
        def warned():
            got = hub.call("GET", f"/workloads/{w['id']}", hub.tokens["alice"]).json()
            return "Idle for" in ((got.get("metadata") or {}).get("status") or {}).get("message", "")
        wait_for("the idle warning on alice's workload", warned, 30)

        # ... then takes the GPU back, audited with the GPU-hours returned ...
        wait_for("the reclaim", lambda: hub.call("GET", f"/workloads/{w['id']}", hub.tokens["alice"]).json()
                 ["state"] == "reclaimed", 40)
        events = hub.call("GET", f"/audit?workload={w['id']}", hub.tokens["ada"]).json()["events"]
        kinds = [e["kind"] for e in events]
        assert "idle_warning" in kinds and "reclaimed" in kinds, kinds
        # The GPU went back only once the server had stopped (its kernel may hold GPU memory till
        # then): "reclaiming" when the policy decided, "reclaimed" when the spawner reported the end.
        assert kinds.index("reclaiming") < kinds.index("reclaimed"), kinds
        ended = hub.call("GET", f"/workloads/{w['id']}", hub.tokens["alice"]).json()
        assert ended["reason"].endswith("it ended (server stopped)"), ended
        [returned] = [e for e in events if e["kind"] == "gpu_returned"]
        assert returned["data"]["gpus"] == 1 and returned["data"]["gpu_hours_returned"] > 0

        # ... and the server comes back without a GPU, its files kept, the GPU free for others.
        def restarted_without_gpu():
            ws = workloads(hub, "alice", "running")
            return ws and ws[0]["resources"].get("gpu", 0) == 0 and server_ready(hub, "alice")
        wait_for("alice's server restarted without a GPU", restarted_without_gpu, 90)
        assert server_procs(hub)["alice"][1]["CUDA_VISIBLE_DEVICES"] == ""
        node = hub.call("GET", "/nodes", hub.tokens["ada"]).json()["nodes"][0]
        assert node["free_gpus"] == [0]


@pytest.mark.slow
def test_hub_restart_keeps_running_servers_and_leaks_no_queue_entry(tmp_path):
    hub = RealHub(tmp_path, extra_service_config=IDLE_SERVICE.replace(
                      '"idle": {"warn_after": 4, "release_after": 9}', '"idle": {}'),
                  configure_kwargs='notebook_watch={"interval": 0.5, "orphan_grace": 3}')
    hub.spawner_config = spawner_config(hub) + "\nc.JupyterHub.cleanup_servers = False\n"
    try:
        hub.start()
        start_server(hub, "alice")
        wait_for("alice's server to start", lambda: server_ready(hub, "alice"), 90)
        start_server(hub, "bob")
        wait_for("bob's queued spawn", lambda: workloads(hub, "bob", "pending"), 30)
        alice_pid = server_procs(hub)["alice"][0]
        [alice_w] = workloads(hub, "alice", "running")

        hub.stop()          # the hub, its proxy and its services go; alice's server stays (cleanup_servers)
        assert server_procs(hub)["alice"][0] == alice_pid
        hub.start()

        # alice's server is found again, still holding the GPU; bob's lost spawn is withdrawn.
        assert server_ready(hub, "alice")
        assert hub.call("GET", f"/workloads/{alice_w['id']}", hub.tokens["ada"]).json()["state"] == "running"
        wait_for("bob's orphaned queue entry to be withdrawn",
                 lambda: not workloads(hub, "bob", "pending", "admitted", "running"), 30)
        [bob_w] = workloads(hub, "bob", "cancelled")
        assert bob_w["reason"]

        # Stopping alice after the restart still returns the GPU.
        r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
        assert r.status_code in (202, 204), r.text
        wait_for("the GPU to return after the restart",
                 lambda: hub.call("GET", "/nodes", hub.tokens["ada"]).json()["nodes"][0]["free_gpus"] == [0], 30)
        assert hub.call("GET", f"/workloads/{alice_w['id']}", hub.tokens["ada"]).json()["state"] == "finished"
    finally:
        hub.stop()
        kill_servers(hub)
