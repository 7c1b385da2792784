"""The launcher driver end to end (tests/spawner/launcherhub.py: a real hub + proxy +
ComputeHub service, the launcher as the hub's managed service, jobs as real local processes,
the GPUs emulated). Shown: a job's exit code and last log lines reach the service; a working
directory outside the allowed folders is refused with a reason; a crashed inference service is
restarted up to the limit; a launcher killed with -9 is restarted by the hub and adopts the job
that still runs and reports the one that ended meanwhile; the hub config gives single-user
servers' tokens the scopes %submit needs. Preemption and checkpoints:
test_launcher_preemption.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcherhub import get, kill_jobs, launcher_pids, py, running_launcher_hub, state_is, submit, wait_for  # noqa: E402
from realhub import RealHub  # noqa: E402


@pytest.fixture(scope="module")
def lhub(tmp_path_factory):
    with running_launcher_hub(tmp_path_factory.mktemp("lhub")) as hw:
        yield hw


def test_exit_code_and_last_lines_reach_the_service(lhub):
    hub, work = lhub
    ok = submit(hub, "alice", py("import os; print('hello', os.environ['CUDA_VISIBLE_DEVICES'])"), work)
    bad = submit(hub, "alice", py("print('about to fail'); raise SystemExit(3)"), work)
    w = wait_for("the good job to finish", lambda: state_is(hub, ok["id"], "finished", "failed"))
    assert w["state"] == "finished" and w["exit_code"] == 0, w
    lines = hub.call("GET", f"/workloads/{ok['id']}/logs", hub.tokens["alice"]).json()["lines"]
    assert any(line.startswith("hello ") and line.split()[1] in ("0", "1") for line in lines), lines
    w = wait_for("the bad job to fail", lambda: state_is(hub, bad["id"], "finished", "failed"))
    assert w["state"] == "failed" and w["exit_code"] == 3, w
    assert "exited with code 3" in w["reason"] and "about to fail" in w["reason"], w["reason"]


def test_a_workdir_outside_the_allowed_folders_is_refused(lhub):
    hub, _ = lhub
    w = submit(hub, "bob", ["true"], Path("/etc"))
    w = wait_for("the refusal", lambda: state_is(hub, w["id"], "failed"))
    assert "working directory /etc is outside the folders jobs may run in" in w["reason"], w["reason"]
    # Following its log, the owner learns why it never ran (it has no log to say so).
    env = dict(os.environ, COMPUTEHUB_URL=hub.service_url, COMPUTEHUB_TOKEN=hub.tokens["bob"])
    out = subprocess.run([sys.executable, "-m", "hub_ext", "logs", w["id"], "--follow"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr.splitlines() == [
        f"{w['id']}: no output yet", f"[{w['id']} failed: {w['reason'].splitlines()[0]}]"], out.stderr


def test_inference_crash_is_restarted_up_to_the_limit(lhub):
    hub, work = lhub
    w = submit(hub, "alice", "echo crash $PORT; exit 7", work, kind="inference", gpus=1)
    w = wait_for("the service to give up", lambda: state_is(hub, w["id"], "failed"), 60)
    assert w["exit_code"] == 7, w
    assert w["metadata"]["status"]["restarts"] == 2, w["metadata"]
    lines = hub.call("GET", f"/workloads/{w['id']}/logs", hub.tokens["alice"]).json()["lines"]
    assert sum(1 for line in lines if line.startswith("crash ")) == 3, lines


def test_launcher_restart_adopts_running_work_and_reports_what_died(lhub):
    hub, work = lhub
    flag = work / "go-on"
    long = submit(hub, "alice", py(f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.1)\n"
                                   "print('saw the flag')"), work)
    short = submit(hub, "alice", py("import time; time.sleep(3); raise SystemExit(5)"), work)
    wait_for("both to run", lambda: all(state_is(hub, x["id"], "running") for x in (long, short)))
    old = launcher_pids(hub)
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    # while no launcher watches, the short job ends (exit 5)
    wait_for("a new launcher from the hub", lambda: [p for p in launcher_pids(hub) if p not in old], 90)
    w = wait_for("the short job's end to be reported", lambda: state_is(hub, short["id"], "failed"), 60)
    assert w["exit_code"] == 5, w
    assert state_is(hub, long["id"], "running"), get(hub, long["id"])
    flag.write_text("")
    w = wait_for("the adopted job to finish", lambda: state_is(hub, long["id"], "finished"), 60)
    assert w["exit_code"] == 0


def test_server_tokens_may_call_the_service():
    """configure_jupyterhub gives single-user servers' $JUPYTERHUB_API_TOKEN the hub's default
    server scopes plus what %submit needs, and registers the launcher with the on-behalf role."""
    from traitlets.config import Config

    from hub_ext.hubconfig import configure_jupyterhub

    c = Config()
    configure_jupyterhub(c, port=10101, launcher=True)
    assert set(c.Spawner.server_token_scopes) == {"users:activity!user", "access:servers!server",
                                                   "custom:computehub:submit",
                                                   "access:services!service=computehub"}
    launcher = [s for s in c.JupyterHub.services if s["name"] == "computehub-launcher"][0]
    assert launcher["command"][1:3] == ["-m", "spawner.launcher_app"]
    assert launcher["environment"]["COMPUTEHUB_URL"] == "http://127.0.0.1:10101/services/computehub"
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "computehub-launcher" in roles["computehub-on-behalf"]["services"]
    # Under a hub base URL the service's paths carry it (JupyterHub's Service.prefix does).
    cb = Config()
    cb.JupyterHub.base_url = "/jupyter"
    configure_jupyterhub(cb, port=10101, launcher=True, notebook_watch=True)
    env = {s["name"]: s.get("environment", {}) for s in cb.JupyterHub.services}
    assert env["computehub-launcher"]["COMPUTEHUB_URL"] == "http://127.0.0.1:10101/jupyter/services/computehub"
    assert env["computehub-notebooks"]["COMPUTEHUB_URL"] == "http://127.0.0.1:10101/jupyter/services/computehub"
    assert cb.JupyterHub.template_vars["computehub_url"] == "/jupyter/services/computehub/"
    c2 = Config()
    c2.Spawner.server_token_scopes = ["inherit"]
    configure_jupyterhub(c2)
    assert "inherit" in c2.Spawner.server_token_scopes


def test_cli_run_jobs_and_logs_follow(lhub):
    """`computehub run -- COMMAND` in a folder, then `computehub logs ID --follow` until it ends."""
    hub, work = lhub
    env = dict(os.environ, COMPUTEHUB_URL=hub.service_url, COMPUTEHUB_TOKEN=hub.tokens["carol"])
    cli = [sys.executable, "-m", "hub_ext"]
    out = subprocess.run(cli + ["run", "--queue", "nlp", "--gpus", "1", "--", sys.executable, "-c",
                                "import os, time; time.sleep(1); print('cli job in', os.getcwd())"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    wid = out.stdout.split()[0]
    out = subprocess.run(cli + ["logs", wid, "--follow"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"cli job in {work}" in out.stdout and f"[{wid} finished]" in out.stderr, (out.stdout, out.stderr)
    out = subprocess.run(cli + ["jobs", "--all"], env=env, capture_output=True, text=True, timeout=60)
    assert any(line.split()[:1] == [wid] and "finished" in line for line in out.stdout.splitlines()), out.stdout
    out = subprocess.run(cli + ["run", "--time", "banana", "--", "true"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "--time" in out.stderr, out.stderr


def test_a_notebook_servers_own_token_and_url_submit_jobs(lhub):
    """What a kernel in a spawned single-user server has — $JUPYTERHUB_API_TOKEN with
    Spawner.server_token_scopes and $COMPUTEHUB_URL from the spawner — is enough for the jobs client."""
    import requests

    from labextension import jobs

    hub, work = lhub
    api = f"{hub.url}/hub/api/users/alice"
    auth = {"Authorization": f"token {hub.tokens['alice']}"}
    r = requests.post(api + "/server", headers=auth, timeout=30)
    assert r.status_code in (201, 202), r.text
    try:
        wait_for("alice's server", lambda: (requests.get(api, headers=auth, timeout=10).json()["servers"]
                                            .get("", {}).get("ready")), 120)
        env = wait_for("the server's environment", lambda: server_env(hub, "alice"), 30)
        home = work / "alice"
        me = requests.get(f"{hub.url}/hub/api/user", timeout=10,
                          headers={"Authorization": f"token {env['JUPYTERHUB_API_TOKEN']}"}).json()
        assert {"custom:computehub:submit", "access:services!service=computehub"} <= set(me["scopes"]), me
        client = jobs.Client(env["COMPUTEHUB_URL"], env["JUPYTERHUB_API_TOKEN"])
        job = client.submit_spec(jobs.job_spec([sys.executable, "-c", "print('from the server token')"],
                                               gpus=0, workdir=str(home)))
        w = job.wait(timeout=90, every=0.3)
        assert w["state"] == "finished" and w["user"] == "alice", w
        assert "from the server token" in job.logs()
    finally:
        requests.delete(api + "/server", headers=auth, timeout=30)


def server_env(hub: RealHub, user: str) -> dict | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)
        if env.get("JUPYTERHUB_USER") == user and str(hub.dir) in env.get("HOME", ""):
            return env
    return None
