"""The launcher driver end to end: a real hub + proxy + ComputeHub service, and the launcher
as the hub's managed service (``configure_jupyterhub(..., launcher=True)``) running jobs as
real local processes. Emulated: the GPUs (a declared simulated node "local" with 2 GPUs;
jobs see their indices in CUDA_VISIBLE_DEVICES). The hub users have no OS accounts here,
so jobs run as the launcher's own user (demo mode).

Shown: a job's exit code and last log lines reach the service; a preempted job gets
SIGTERM, saves to $COMPUTEHUB_CHECKPOINT_DIR (the service learns it saves on stop), is
requeued and resumes from it; a crashed
inference service is restarted up to the limit; the checkpoints a job saves reach the
service; a teammate's short job preempts a long one of
the same class (preempt_for_shorter); a working directory outside the allowed
folders is refused with a reason; a launcher killed with -9 is restarted by the hub and
adopts the job that still runs and reports the one that ended meanwhile; the hub config
gives single-user servers' tokens the scopes %submit needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from realhub import RealHub  # noqa: E402

SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "local", "gpus": 2, "gpu_model": "sim", "cpu": 8, "memory": "32Gi",
     "labels": {"computehub/simulated": "true"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 2}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "groups": ["nlp"]},
]
c.LocalLauncher.allowed_roots = [ROOT]
c.LauncherApp.poll_interval = 0.3
c.LauncherApp.preempt_grace = 20
c.LauncherApp.max_restarts = 2
"""


def launcher_hub(tmp: Path, extra_service_config: str = "") -> tuple[RealHub, Path]:
    """A hub with the managed launcher; notebook servers (no GPU) get homes under work/.
    ``extra_service_config`` comes after SERVICE (later settings win)."""
    work = tmp / "work"
    work.mkdir()
    hub = RealHub(tmp, extra_service_config=SERVICE.replace("ROOT", repr(str(work))) + extra_service_config,
                  configure_kwargs="launcher=True")
    hub.spawner_config = f"""
c.JupyterHub.spawner_class = "spawner.local.QueuedSimpleLocalProcessSpawner"
c.QueueingMixin.computehub_token = "{hub.launcher_token}"
c.QueueingMixin.gpus = 0
c.Spawner.args = {["--allow-root"] if os.getuid() == 0 else []!r}
c.Spawner.http_timeout = 60
c.SimpleLocalProcessSpawner.home_dir_template = "{work}/{{username}}"
"""
    return hub, work


def launcher_pids(hub: RealHub) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"spawner.launcher_app.*{hub.data_dir}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def kill_jobs(hub: RealHub) -> None:
    """Never leave a job behind: the launcher's records name every process group it started."""
    for pid in launcher_pids(hub):
        os.kill(pid, signal.SIGKILL)
    state = hub.data_dir / "launcher"
    for rec in state.glob("*.json") if state.exists() else ():
        for w in json.loads(rec.read_text())["workers"]:
            try:
                os.killpg(w["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@contextlib.contextmanager
def running_launcher_hub(tmp: Path, extra_service_config: str = ""):
    """``launcher_hub`` started, its launcher up; stopped with every job it ran."""
    hub, work = launcher_hub(tmp, extra_service_config)
    try:
        hub.start()
        wait_for("the launcher", lambda: launcher_pids(hub), 60)
        yield hub, work
    finally:
        hub.stop()
        kill_jobs(hub)


@pytest.fixture(scope="module")
def lhub(tmp_path_factory):
    with running_launcher_hub(tmp_path_factory.mktemp("lhub")) as hw:
        yield hw


def wait_for(what, fn, timeout=60.0, every=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def submit(hub, user, command, work, kind="training", gpus=1, **extra):
    body = {"kind": kind, "queue": "vision", "resources": {"gpu": gpus},
            "metadata": {"job": {"command": command, "workdir": str(work)}}, **extra}
    r = hub.call("POST", "/workloads", hub.tokens[user], json=body)
    assert r.status_code == 201, r.text
    return r.json()


def get(hub, wid, user="ada"):
    r = hub.call("GET", f"/workloads/{wid}", hub.tokens[user])
    assert r.status_code == 200, r.text
    return r.json()


def state_is(hub, wid, *states):
    w = get(hub, wid)
    return w if w["state"] in states else None


def py(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


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


def preempted_once(hub, work, code: str, before=lambda victim: True):
    """bob's 2-GPU batch job running ``code`` is preempted by alice's 2-GPU training job,
    requeued and run again to its end: (the workload then, its log lines). ``before(victim)``
    must hold while it first runs."""
    victim = submit(hub, "bob", py(code), work, kind="batch", gpus=2)
    wait_for("the batch job to run", lambda: state_is(hub, victim["id"], "running"))
    time.sleep(1.0)
    assert before(victim), get(hub, victim["id"])
    urgent = submit(hub, "alice", py("print('urgent done')"), work, gpus=2)
    wait_for("the urgent job to finish", lambda: state_is(hub, urgent["id"], "finished"), 90)
    w = wait_for("the victim to run again and finish", lambda: state_is(hub, victim["id"], "finished"), 90)
    return w, hub.call("GET", f"/workloads/{victim['id']}/logs", hub.tokens["bob"]).json()["lines"]


def test_preemption_sigterm_checkpoint_requeue_resume(lhub):
    """A batch job (preemptible at once) holding both GPUs is preempted by a training job:
    SIGTERM, it saves a checkpoint, the launcher reports it stopped, it is requeued, and when it
    runs again it finds its checkpoint (same $COMPUTEHUB_CHECKPOINT_DIR)."""
    hub, work = lhub
    code = ("import os, signal, sys, time\n"
            "ck = os.path.join(os.environ['COMPUTEHUB_CHECKPOINT_DIR'], 'step')\n"
            "step = int(open(ck).read()) if os.path.exists(ck) else 0\n"
            "print('resumed from', step, flush=True)\n"
            "def term(*_):\n"
            "    open(ck, 'w').write(str(step)); print('checkpointed', step, flush=True); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "if step: sys.exit(0)\n"
            "while True:\n"
            "    step += 1; time.sleep(0.05)\n")
    w, lines = preempted_once(hub, work, code)
    assert w["preemptions"] >= 1, w
    saved = [int(x.split()[1]) for x in lines if x.startswith("checkpointed ")]
    resumed = [int(x.split()[2]) for x in lines if x.startswith("resumed from ")]
    assert saved and saved[0] > 0, lines
    assert resumed[:2] == [0, saved[0]], lines
    # The launcher saw the save it made when told to stop: a preemption now loses only its restart.
    assert w["saves_on_stop"] is True and w["checkpointed_at"] is not None, w


def test_a_job_that_saves_on_preemption_tells_the_scheduler_itself(lhub):
    """``save_on_preemption(save)``: on SIGTERM the job saves where the launcher does not look
    (here its working folder) and reports the save itself, so the service learns that it saves
    on stop (its later preemptions lose only the restart) without the launcher seeing a file."""
    hub, work = lhub
    code = ("import os, sys, time\n"
            "from hub_ext.client import save_on_preemption\n"
            "mark = os.path.join(os.getcwd(), 'saved-' + os.environ['COMPUTEHUB_WORKLOAD_ID'])\n"
            "if os.path.exists(mark):\n"
            "    print('resumed', flush=True); sys.exit(0)\n"
            "print('checkpoint folder', os.environ['COMPUTEHUB_CHECKPOINT_DIR'], flush=True)\n"
            "def save():\n"
            "    open(mark, 'w').write('state'); print('saved on stop', flush=True)\n"
            "save_on_preemption(save)\n"
            "while True:\n"
            "    time.sleep(0.05)\n")
    w, lines = preempted_once(hub, work, code,
                              before=lambda v: get(hub, v["id"])["saves_on_stop"] is False)
    assert "saved on stop" in lines and "resumed" in lines, lines
    assert w["preemptions"] >= 1 and w["saves_on_stop"] is True, w
    folder = next(x for x in lines if x.startswith("checkpoint folder ")).split(" ", 2)[2]
    assert os.path.isdir(folder) and not os.listdir(folder)          # nothing the launcher could have seen


def test_the_checkpoints_a_job_saves_reach_the_service(lhub):
    """A job saves into $COMPUTEHUB_CHECKPOINT_DIR (write, then rename); the launcher sees each
    new file and reports it, so the service knows when the job last saved (what a preemption
    would lose). A job that saves nothing has no checkpoint time."""
    hub, work = lhub
    code = ("import os, time\n"
            "d = os.environ['COMPUTEHUB_CHECKPOINT_DIR']\n"
            "for i in range(3):\n"
            "    time.sleep(1.5)\n"
            "    open(os.path.join(d, 'last.pt.tmp'), 'w').write(str(i))\n"
            "    os.replace(os.path.join(d, 'last.pt.tmp'), os.path.join(d, 'last.pt'))\n"
            "    print('saved', os.stat(os.path.join(d, 'last.pt')).st_mtime, flush=True)\n"
            "time.sleep(60)\n")
    saver = submit(hub, "bob", py(code), work, kind="batch")
    quiet = submit(hub, "bob", py("import time; time.sleep(60)"), work, kind="batch")
    try:
        first = wait_for("a first checkpoint", lambda: get(hub, saver["id"])["checkpointed_at"], 30)
        w = get(hub, saver["id"])
        assert w["state"] == "running" and first >= w["started_at"], w
        last = wait_for("the third checkpoint", lambda: len(
            [x for x in hub.call("GET", f"/workloads/{saver['id']}/logs", hub.tokens["bob"]).json()["lines"]
             if x.startswith("saved ")]) == 3 and get(hub, saver["id"])["checkpointed_at"] > first
            and get(hub, saver["id"]), 30)
        lines = hub.call("GET", f"/workloads/{saver['id']}/logs", hub.tokens["bob"]).json()["lines"]
        saves = [float(x.split()[1]) for x in lines if x.startswith("saved ")]
        wait_for("the last save reported", lambda: get(hub, saver["id"])["checkpointed_at"] == saves[-1], 10)
        assert first in saves and last["checkpointed_at"] in saves, (first, last, saves)
        q = get(hub, quiet["id"])
        assert q["state"] == "running" and q["checkpointed_at"] is None, q
    finally:
        for w in (saver, quiet):
            hub.call("DELETE", f"/workloads/{w['id']}", hub.tokens["bob"])


def test_a_job_reports_its_own_checkpoints_with_its_report_token(lhub):
    """A job that saves where the launcher cannot look (object storage, another disk) reports
    each save itself: `computehub checkpoint`, or `report_checkpoint()` in Python, with the
    $COMPUTEHUB_URL and $COMPUTEHUB_REPORT_TOKEN the launcher gave it; it holds no hub token."""
    hub, work = lhub
    code = ("import os, subprocess, sys, time\n"
            "print('hub token', any(k in os.environ for k in ('COMPUTEHUB_TOKEN', 'JUPYTERHUB_API_TOKEN')),"
            " flush=True)\n"
            "time.sleep(1)\n"
            "out = subprocess.run([sys.executable, '-m', 'hub_ext', 'checkpoint'], capture_output=True, text=True)\n"
            "print('cli', out.returncode, out.stdout.strip(), out.stderr.strip(), flush=True)\n"
            "time.sleep(1.5)\n"
            "from hub_ext.client import report_checkpoint\n"
            "print('again', report_checkpoint()['checkpointed_at'], flush=True)\n"
            "time.sleep(60)\n")
    job = submit(hub, "bob", py(code), work, kind="batch")
    try:
        def lines():
            return hub.call("GET", f"/workloads/{job['id']}/logs", hub.tokens["bob"]).json().get("lines", [])
        wait_for("both reports", lambda: any(x.startswith("again ") for x in lines()), 30)
        out = {x.split()[0]: x for x in lines() if x.split()[:1] in (["hub"], ["cli"], ["again"])}
        assert out["hub"] == "hub token False", out
        assert out["cli"].startswith(f"cli 0 {job['id']}  running  checkpoint saved"), out
        w = get(hub, job["id"])
        assert w["checkpointed_at"] == float(out["again"].split()[1]), (w, out)
        assert 1 <= w["checkpoint_seen_every"] <= 10, w        # two reports of one run: its cadence
    finally:
        hub.call("DELETE", f"/workloads/{job['id']}", hub.tokens["bob"])


def test_short_work_preempts_longer_work_of_the_same_team_and_class(lhub):
    """preempt_for_shorter through the real service and launcher: a batch job declaring a day
    holds both GPUs of team vision; a teammate's batch job declaring a minute preempts it (same
    queue, same class: only the rule for shorter work allows it), runs, and the long job resumes
    from its checkpoint."""
    hub, work = lhub
    code = ("import os, signal, sys, time\n"
            "ck = os.path.join(os.environ['COMPUTEHUB_CHECKPOINT_DIR'], 'step')\n"
            "step = int(open(ck).read()) if os.path.exists(ck) else 0\n"
            "def term(*_):\n"
            "    open(ck, 'w').write(str(step)); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "if step: print('resumed', flush=True); sys.exit(0)\n"
            "while True:\n"
            "    step += 1; time.sleep(0.05)\n")
    long_ = submit(hub, "bob", py(code), work, kind="batch", gpus=2, time_limit=86400)
    wait_for("the long job to run", lambda: state_is(hub, long_["id"], "running"))
    short = submit(hub, "alice", py("print('short done')"), work, kind="batch", gpus=2, time_limit=60)
    wait_for("the short job to finish", lambda: state_is(hub, short["id"], "finished"), 90)
    w = wait_for("the long job to resume and finish", lambda: state_is(hub, long_["id"], "finished"), 90)
    assert w["preemptions"] >= 1 and w["metadata"].get("preempted_by") == short["id"], w
    lines = hub.call("GET", f"/workloads/{long_['id']}/logs", hub.tokens["bob"]).json()["lines"]
    assert "resumed" in lines, lines


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
