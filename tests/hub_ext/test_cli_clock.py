"""The CLI counts times on the service's clock, read from its answers' Date header, not on the
clock of the machine it runs on: a laptop two hours fast still says a checkpoint was saved
seconds ago and still means two hours from now by `--begin 2h`. Through the real hub, proxy and
service with the installed CLI; the fast clock is emulated in the CLI's process alone (a
sitecustomize that shifts time.time), since this machine's clock cannot be changed for a test."""

from __future__ import annotations

import re
import time

from test_cli_client import admitted, cli, ok, submit, submitted  # noqa: F401

FAST = 7200.0


def test_a_fast_client_clock_changes_neither_ages_nor_begin_times(hub, submitted, tmp_path):  # noqa: F811
    (tmp_path / "sitecustomize.py").write_text(
        f"import time\n_real = time.time\ntime.time = lambda: _real() + {FAST}\n")
    fast = {"PYTHONPATH": str(tmp_path)}
    w = admitted(hub, submitted, "alice", "--kind", "batch", "--cpu", "100m", "--name", "fast-clock")
    r = hub.call("POST", f"/workloads/{w['id']}/status", hub.launcher_token, json={"state": "running"})
    assert r.status_code == 200, r.text
    r = hub.call("POST", f"/workloads/{w['id']}/status", hub.launcher_token,
                 json={"state": "checkpoint", "at": r.json()["started_at"] + 0.1})
    assert r.status_code == 200, r.text
    row = next(x for x in ok(cli(hub, "alice", "queue", env_extra=fast)).splitlines() if x.startswith(w["id"]))
    assert re.search(r"checkpoint saved \d+s ago$", row), row           # not "2h0m ago"
    assert not re.search(r"\b2h", row), row                            # its age either

    asked = time.time()
    later = submit(hub, submitted, "alice", "--kind", "batch", "--cpu", "100m", "--begin", "1h")
    timed = ok(cli(hub, "alice", "submit", "--json", "--kind", "batch", "--cpu", "100m", "--begin", "1h",
                   env_extra=fast))
    wid = re.search(r'"id": "(w\d+)"', timed).group(1)
    submitted.append(("alice", wid))
    until = hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()["metadata"]["hold"]["until"]
    # An hour from now by the service's clock, within the second its Date header is to.
    assert asked + 3600 - 2 <= until <= time.time() + 3600 + 2, (until - asked)
    assert abs(until - later["metadata"]["hold"]["until"]) < 60
