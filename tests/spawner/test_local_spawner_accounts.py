"""``QueuedLocalProcessSpawner`` never starts a notebook server as root or another system
account: a real hub, proxy and ComputeHub service (realhub.py), hub users named like the
machine's ``daemon`` (uid 1) and ``nobody`` (65534) accounts, as an OAuth login could be.
Before, the server would have started as that account (as root for a user named root)."""

from __future__ import annotations

import pwd
import time

import pytest
from localhub import RealHub, hub_api, spawner_config



def _has(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture
def accounts_hub(tmp_path):
    hub = RealHub(tmp_path)
    hub.spawner_config = spawner_config(hub).replace(
        "spawner.local.QueuedSimpleLocalProcessSpawner", "spawner.local.QueuedLocalProcessSpawner") + \
        '\nc.Authenticator.allowed_users |= {"daemon", "nobody"}\n' \
        '\nc.QueueingMixin.computehub_queue = "vision"\n'     # a queue they may be queued in
    with hub:
        for name in ("daemon", "nobody"):
            hub.tokens[name] = hub.make_token(name)
        yield hub


@pytest.mark.parametrize("name", ["daemon", "nobody"])
def test_a_hub_user_named_like_a_system_account_gets_no_server(accounts_hub, name):
    assert _has(name), f"this machine has no {name!r} account (Debian has both)"
    hub, uid = accounts_hub, pwd.getpwnam(name).pw_uid
    r = hub_api(hub, "POST", f"/users/{name}/server", name)
    deadline = time.time() + 30
    while True:
        model = hub_api(hub, "GET", f"/users/{name}", name).json()
        if not model.get("pending") or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code >= 400 or not model["servers"], (r.status_code, model)
    assert not model["servers"]
    said = f"'{name}' is a system account on this machine (uid {uid}, outside 1000-60000)"
    assert said in (r.text + hub.tail(200_000)), r.text
    # Nothing was queued for it.
    listed = hub.call("GET", f"/workloads?user={name}", hub.tokens["ada"]).json()["workloads"]
    assert listed == []
