"""Failing local jobs, end to end: what a user sees through the service (GET workloads/{id}:
state, exit code, reason; `computehub jobs`; `computehub logs`; what %submit's display shows,
through the magics' own ``describe``), and that the GPUs come back. A real hub + proxy +
ComputeHub service with its managed local launcher (tests/spawner/launcherhub.py), jobs as real
processes. Emulated: the GPUs (a declared simulated node with 2); the kernel's OOM killer, by a
job that gets SIGKILL. The backend's reasons one by one: test_launch_local_failures.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcherhub import py, running_launcher_hub, state_is, submit, wait_for  # noqa: E402

EXTRA = """
c.LauncherApp.cancel_grace = 1
c.LocalLauncher.ready_timeout = 4
"""
OOM = "the job was killed by signal 9 (SIGKILL: out of memory? see dmesg)"


@pytest.fixture(scope="module")
def lhub(tmp_path_factory):
    with running_launcher_hub(tmp_path_factory.mktemp("lfail"), EXTRA) as hw:
        yield hw


def logs(hub, wid, user="alice") -> list[str]:
    return hub.call("GET", f"/workloads/{wid}/logs", hub.tokens[user]).json()["lines"]


def cli(hub, user, *args) -> str:
    env = dict(os.environ, COMPUTEHUB_URL=hub.service_url, COMPUTEHUB_TOKEN=hub.tokens[user])
    out = subprocess.run([sys.executable, "-m", "hub_ext", *args], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def gpus_free(hub) -> int:
    nodes = hub.call("GET", "/nodes", hub.tokens["ada"]).json()["nodes"]
    return sum(len(n["free_gpus"]) for n in nodes)


def test_a_job_killed_like_by_the_oom_killer(lhub):
    hub, work = lhub
    w = submit(hub, "alice", py("import os, signal; print('allocating', flush=True); "
                                "os.kill(os.getpid(), signal.SIGKILL)"), work, gpus=2)
    w = wait_for("it to fail", lambda: state_is(hub, w["id"], "failed", "finished"), 60)
    assert w["state"] == "failed" and w["exit_code"] == 137, w
    assert w["reason"].startswith(OOM + "; last lines:\n") and "allocating" in w["reason"], w["reason"]
    assert wait_for("its GPUs back", lambda: gpus_free(hub) == 2, 30)
    lines = logs(hub, w["id"])
    assert lines[-1].startswith("[computehub] ") and lines[-1].endswith(OOM), lines
    from labextension.magics import describe           # what %submit's display shows of it
    head, detail = describe(w, lines)
    assert "failed, exit code 137" in head and detail.splitlines()[-1].endswith(OOM), (head, detail)
    row = [line for line in cli(hub, "alice", "jobs", "--all").splitlines() if line.startswith(w["id"])]
    assert row and OOM in row[0], row
    assert cli(hub, "alice", "logs", w["id"]).splitlines()[-1].endswith(OOM)


def test_a_program_that_does_not_exist(lhub):
    hub, work = lhub
    w = submit(hub, "alice", ["./trian.py", "--lr", "0.1"], work)
    w = wait_for("it to fail", lambda: state_is(hub, w["id"], "failed", "finished"), 60)
    assert w["exit_code"] == 127, w
    assert w["reason"].startswith(f"the job could not run: ./trian.py: no such file (working directory {work})"), w
    assert "Traceback" not in w["reason"]


def test_an_inference_service_that_never_listens_fails_after_ready_timeout(lhub):
    hub, work = lhub
    w = submit(hub, "alice", "echo loading the model; exec sleep 120", work, kind="inference")
    w = wait_for("it to be given up", lambda: state_is(hub, w["id"], "failed"), 60)
    assert w["reason"].startswith("the service did not answer HTTP on port ") and \
        "within 4 s (LocalLauncher.ready_timeout): does it listen on $PORT" in w["reason"], w["reason"]
    assert not (w["metadata"].get("status") or {}).get("restarts"), w["metadata"]      # not restarted: no use


def test_a_crash_looping_service_says_how_often_it_crashed(lhub):
    hub, work = lhub
    w = submit(hub, "alice", "echo crash; exit 7", work, kind="inference")
    w = wait_for("it to be given up", lambda: state_is(hub, w["id"], "failed"), 60)
    assert w["exit_code"] == 7 and w["metadata"]["status"]["restarts"] == 2, w
    assert w["reason"].startswith("the service exited with code 7; it crashed 3 times, more than max_restarts (2)"), \
        w["reason"]


def test_a_job_that_ignores_sigterm_past_its_time_limit(lhub):
    hub, work = lhub
    w = submit(hub, "alice", "trap '' TERM; echo working; sleep 120 & wait", work, time_limit=2)
    w = wait_for("it to be stopped", lambda: state_is(hub, w["id"], "failed"), 60)
    assert w["exit_code"] == 124, w
    assert w["reason"].startswith("exceeded its time limit of 2 s; it did not exit within the 1 s grace after "
                                  "SIGTERM: killed (SIGKILL)"), w["reason"]


def test_a_running_job_whose_owner_shortens_its_limit_is_stopped_at_the_new_one(lhub):
    """`computehub update ID --time 2s` on running work: the launcher reads the new limit at its next
    look and stops the job there (scheduler/updates.py; docs/cli.md, "Changing waiting work")."""
    hub, work = lhub
    w = submit(hub, "alice", "echo working; exec sleep 120", work, time_limit=3600)
    wait_for("it to run", lambda: state_is(hub, w["id"], "running"), 60)
    out = cli(hub, "alice", "update", w["id"], "--time", "2")
    assert out.split()[:2] == [w["id"], "running"] and "limit 2 s" in out, out
    w = wait_for("it to be stopped", lambda: state_is(hub, w["id"], "failed"), 60)
    assert w["exit_code"] == 124 and w["reason"].startswith("exceeded its time limit of 2 s"), w


def test_a_daemon_that_covered_its_tracks_is_stopped_and_its_gpus_come_back(lhub):
    """A job whose daemon left its session and cleared its environment (test_launch_local_escapes.py
    has the backend's cases): the service hears that it was stopped, and the GPUs are free again
    only once it is gone."""
    from test_launch_local_escapes import DAEMONIZE
    from test_launch_local import alive
    hub, work = lhub
    w = submit(hub, "alice", py(DAEMONIZE) + ["daemon.pid"], work, gpus=2)
    w = wait_for("it to end", lambda: state_is(hub, w["id"], "failed", "finished"), 60)
    daemon = int((work / "daemon.pid").read_text())
    assert w["state"] == "finished" and w["exit_code"] == 0, w
    assert w["reason"] == f"exit code 0; it left 1 process(es) running after it exited ({daemon} (sleep)): stopped", w
    assert not alive(daemon)
    assert wait_for("its GPUs back", lambda: gpus_free(hub) == 2, 30)
    assert f"it left 1 process(es) running after it exited: {daemon} (sleep); stopping them" in logs(hub, w["id"])[-1]
