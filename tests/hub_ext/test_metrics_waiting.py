"""What an operator reads off /metrics about waiting work, queues and callers, through the real
hub, proxy and service (realhub.py; nothing emulated): work is driven into each state a gauge
reports, and the scrape says so."""

from __future__ import annotations

import time

import requests
from prometheus_client.parser import text_string_to_metric_families


def scrape(hub, token) -> dict[tuple, float]:
    """``{(sample name, (label pairs...)): value}`` of one scrape."""
    r = requests.get(hub.service_url + "/metrics", headers={"Authorization": f"token {token}"}, timeout=10)
    assert r.status_code == 200, r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def wait_for(what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not (out := what()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return out


def submit(hub, user, queue, gpus, **kw):
    r = hub.call("POST", "/workloads", hub.tokens[user], json={"queue": queue, "resources": {"gpu": gpus}, **kw})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_waiting_work_by_reason_age_and_the_guarantee_it_is_owed(fresh_hub):
    # In "shared" each user may hold 2 cores.
    fresh_hub.extra = ('\nc.ComputeHubService.initial_queues.append({"name": "shared", "parent": "org", '
                       '"user_limit": {"cpu": "2"}})\n')
    hub = fresh_hub.start()
    ada = hub.tokens["ada"]
    # vision's 4 guaranteed GPUs, 2 on each node: 2 + 2 GPUs idle, but on no node together.
    east = submit(hub, "alice", "vision", 2, node_selector={"zone": "east"})
    west = submit(hub, "bob", "vision", 2, node_selector={"zone": "west"})
    for wid in (east, west):
        assert wait_for(lambda: hub.call("GET", f"/workloads/{wid}", ada).json()["state"] == "admitted")
    before = time.time()
    frag = submit(hub, "carol", "nlp", 4)                  # fits nlp's guarantee, no node has 4 free
    submit(hub, "carol", "nlp", 4, workers=2)              # 8 GPUs: above nlp's approval threshold (6)
    cpus = submit(hub, "alice", "shared", 0, resources={"cpu": "2"})
    assert wait_for(lambda: hub.call("GET", f"/workloads/{cpus}", ada).json()["state"] == "admitted")
    submit(hub, "alice", "shared", 1, resources={"gpu": 1, "cpu": "1"})   # beyond alice's 2 cores
    assert hub.call("GET", f"/workloads/{frag}", ada).json()["state"] == "pending"

    def settled():
        s = scrape(hub, ada)
        return s if value(s, "computehub_waiting_workloads", queue="nlp", reason="fragmentation") == 1 and \
            value(s, "computehub_waiting_workloads", queue="shared", reason="quota") == 1 else None
    time.sleep(1.5)
    s = wait_for(settled)
    assert s, {k: v for k, v in scrape(hub, ada).items() if "waiting" in k[0] or "pending" in k[0]}
    waiting = {dict(k[1])["queue"] + "/" + dict(k[1])["reason"]: v for k, v in s.items()
               if k[0] == "computehub_waiting_workloads"}
    assert waiting == {"nlp/fragmentation": 1, "nlp/approval": 1, "shared/quota": 1}
    assert value(s, "computehub_pending_gpus", queue="nlp") == 4       # the approval's 8 do not count yet
    assert value(s, "computehub_pending_gpus", queue="shared") == 1
    assert value(s, "computehub_pending_gpus", queue="vision") is None
    now = time.time()
    for queue, state in (("nlp", "pending"), ("nlp", "awaiting_approval"), ("shared", "pending")):
        age = value(s, "computehub_oldest_waiting_seconds", queue=queue, state=state)
        assert age is not None and 1.0 <= age <= now - before + 1, (queue, state, age)
    # nlp is owed carol's 4 GPUs (it uses none of its 4); shared's waiting work is beyond its guarantee.
    owed = value(s, "computehub_queue_owed_wait_seconds", queue="nlp")
    assert 1.0 <= owed <= now - before + 1
    assert value(s, "computehub_queue_owed_wait_seconds", queue="shared") == 0
    assert value(s, "computehub_queue_owed_wait_seconds", queue="vision") == 0
    assert value(s, "computehub_queue_gpus_in_use", queue="vision") == 4
    assert value(s, "computehub_queue_gpus_in_use", queue="org") == 4           # a parent: its subtree
    assert value(s, "computehub_queue_gpus_in_use", queue="nlp") == 0
    assert value(s, "computehub_queue_gpus_guaranteed", queue="nlp") == 4
    assert value(s, "computehub_queue_gpus_guaranteed", queue="org") == 8
    assert value(s, "computehub_queue_gpus_limit", queue="nlp") is None         # no limit set
    assert value(s, "computehub_gpus_capacity", flavor="a100") == 8
    assert value(s, "computehub_gpus_allocated", flavor="all") == 4
    assert value(s, "computehub_workloads", state="awaiting_approval", queue="nlp", priority="preemptible") == 1

    # A cordoned node: its GPUs leave the capacity and are counted as draining; work only it
    # could take cannot be placed now.
    assert hub.call("PATCH", "/nodes/gpu-b", ada, json={"draining": True}).status_code == 200
    submit(hub, "alice", "vision", 1, node_selector={"zone": "west"})
    s = wait_for(lambda: (s := scrape(hub, ada)) and
                 value(s, "computehub_waiting_workloads", queue="vision", reason="unplaceable") == 1 and s)
    assert s, scrape(hub, ada)
    assert value(s, "computehub_nodes", status="draining") == 1
    assert value(s, "computehub_nodes", status="schedulable") == 1
    assert value(s, "computehub_node_gpus", status="draining") == 4
    assert value(s, "computehub_gpus_capacity", flavor="all") == 4


def test_when_each_hub_service_last_called_and_a_limit_is_shown(hub):
    ada = hub.tokens["ada"]
    assert hub.call("PUT", "/queues/metrics-limited", ada, json={"parent": "org", "limit": {"gpu": 3}}).status_code \
        in (200, 201)
    s = scrape(hub, ada)
    assert value(s, "computehub_queue_gpus_limit", queue="metrics-limited") == 3
    before = time.time()
    assert hub.call("GET", "/workloads", hub.launcher_token).status_code == 200
    s = scrape(hub, ada)
    seen = value(s, "computehub_client_last_request_timestamp_seconds", client="launcher")
    assert seen is not None and before - 1 <= seen <= time.time() + 1
    # Users are never a label: only hub services (their number is the hub's configuration).
    clients = {dict(k[1])["client"] for k in s if k[0] == "computehub_client_last_request_timestamp_seconds"}
    assert "ada" not in clients and "alice" not in clients, clients
    assert hub.call("DELETE", "/queues/metrics-limited", ada).status_code == 204


def test_a_requeued_workload_waits_from_its_requeue_not_its_submission(fresh_hub):
    """A job that ran and lost its node waits again from then on: the waiting gauges and the
    wait observed when it is admitted again leave out the time it ran (4 s here)."""
    hub = fresh_hub.start()
    ada = hub.tokens["ada"]
    job = submit(hub, "alice", "vision", 4)
    admitted = wait_for(lambda: (w := hub.call("GET", f"/workloads/{job}", ada).json())["state"] == "admitted" and w)
    assert admitted, hub.call("GET", f"/workloads/{job}", ada).json()
    node = admitted["placement"][0]["node"]
    other, zone = ("gpu-b", "west") if node == "gpu-a" else ("gpu-a", "east")
    first = wait_for(lambda: value(scrape(hub, ada), "computehub_queue_wait_seconds_count", queue="vision") == 1)
    assert first
    waited_first = value(scrape(hub, ada), "computehub_queue_wait_seconds_sum", queue="vision")
    # One of the other node's GPUs taken (inside nlp's guarantee: not a victim), so the job fits nowhere.
    small = submit(hub, "carol", "nlp", 1, node_selector={"zone": zone})
    assert wait_for(lambda: hub.call("GET", f"/workloads/{small}", ada).json()["state"] == "admitted")
    time.sleep(4)                                           # the job runs
    requeued = time.time()
    r = hub.call("DELETE", f"/nodes/{node}", ada)
    assert r.status_code == 200 and r.json()["workloads"] == [job], r.text

    def seen():      # a cycle has looked at it since: pending, for want of capacity
        s = scrape(hub, ada)
        return s if value(s, "computehub_waiting_workloads", queue="vision", reason="capacity") == 1 else None
    s = wait_for(seen)
    assert s, {k: v for k, v in scrape(hub, ada).items() if "waiting" in k[0]}
    since = time.time() - requeued
    oldest = value(s, "computehub_oldest_waiting_seconds", queue="vision", state="pending")
    assert oldest is not None and 0 <= oldest <= since + 0.5, (oldest, since)
    # vision holds none of its 4 guaranteed GPUs now: the job is owed, and has waited as long.
    owed = value(s, "computehub_queue_owed_wait_seconds", queue="vision")
    assert 0 < owed <= since + 0.5, (owed, since)
    assert hub.call("DELETE", f"/workloads/{small}", hub.tokens["carol"]).status_code == 200
    assert wait_for(lambda: hub.call("GET", f"/workloads/{job}", ada).json()["state"] == "admitted")
    s = wait_for(lambda: (s := scrape(hub, ada)) and
                 value(s, "computehub_queue_wait_seconds_count", queue="vision") == 2 and s)
    assert s and s[("computehub_admissions_total", (("queue", "vision"),))] == 2
    waited_again = value(s, "computehub_queue_wait_seconds_sum", queue="vision") - waited_first
    assert 0 <= waited_again <= time.time() - requeued + 0.5, waited_again
    assert hub.call("GET", f"/workloads/{job}", ada).json()["placement"][0]["node"] == other
