"""The local launcher backend on its own: real processes, real signals, no hub.

Workloads are given as the REST API returns them (placement with GPU indices). Emulated:
GPUs (the indices are only passed on in CUDA_VISIBLE_DEVICES). The identity test runs a job
for a hub user named like the system's ``nobody`` account: as root the launcher switches to
it; otherwise jobs run as the launcher's own user (demo mode) — the test expects whichever
applies to the user running it.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from spawner.launch_base import LaunchError, job_of
from spawner.launch_local import LocalLauncher
from spawner.process_groups import group_alive


@pytest.fixture
def root():
    """A folder every account can enter (nobody must reach its working directory)."""
    d = Path(tempfile.mkdtemp(prefix="computehub-launch-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def launcher(root: Path, **kw) -> LocalLauncher:
    kw.setdefault("allow_launcher_user", True)      # "alice" has no OS account: demo mode
    kw.setdefault("max_uid", 65534)     # the tests' OS account is nobody's, as an admin may allow
    return LocalLauncher(logs_dir=str(root / "logs"), allowed_roots=[str(root)],
                         home_template=str(root / "homes" / "{username}"), **kw)


def workload(wid, command, root, workers=1, kind="training", user="alice", **job):
    return {"id": wid, "user": user, "kind": kind, "workers": workers,
            "placement": [{"node": "local", "gpus": [r]} for r in range(workers)],
            "metadata": {"job": {"command": command, "workdir": str(root), **job}}}


def run(coro):
    return asyncio.run(coro)


async def until_ended(lch, w, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = await lch.poll(w)
        if ended is not None:
            return ended
        await asyncio.sleep(0.05)
    raise AssertionError(f"{w['id']} did not end")


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_environment_rank_gpus_checkpoint_and_reserved_names(root):
    lch = launcher(root, job_computehub_url="http://hub.example/services/computehub")
    (root / "homes" / "alice").mkdir(parents=True)
    code = ("import os; keys = ('RANK','WORLD_SIZE','LOCAL_RANK','MASTER_ADDR','MASTER_PORT',"
            "'CUDA_VISIBLE_DEVICES','COMPUTEHUB_CHECKPOINT_DIR','FOO','COMPUTEHUB_WORKLOAD_ID',"
            "'COMPUTEHUB_REPORT_TOKEN','COMPUTEHUB_URL','COMPUTEHUB_ARRAY_ID','COMPUTEHUB_ARRAY_TASK_ID',"
            "'COMPUTEHUB_ARRAY_TASK_COUNT');"
            "open('env-' + os.environ['RANK'], 'w').write(repr({k: os.environ.get(k) for k in keys}))")
    w = workload("w1", py(code), root, workers=2, env={"FOO": "bar", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
                                                       "RANK": "7", "COMPUTEHUB_CHECKPOINT_DIR": "/",
                                                       "COMPUTEHUB_REPORT_TOKEN": "chrt_mine",
                                                       "COMPUTEHUB_URL": "http://elsewhere.example",
                                                       "COMPUTEHUB_ARRAY_TASK_ID": "99"})
    w["report_token"] = "chrt_from_the_service"
    w["array"] = {"id": "w0", "index": 7, "size": 10, "limit": 2}       # task 7 of array w0

    async def go():
        notes = await lch.start(w)
        assert notes["node"] == "local" and "2 worker(s)" in notes["message"]
        return await until_ended(lch, w)
    ended = run(go())
    assert ended.exit_code == 0, ended
    envs = [eval((root / f"env-{r}").read_text()) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"] and [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1"]         # the placement's, not the user's
    assert {e["WORLD_SIZE"] for e in envs} == {"2"} and {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    assert {e["FOO"] for e in envs} == {"bar"} and {e["COMPUTEHUB_WORKLOAD_ID"] for e in envs} == {"w1"}
    assert {e["COMPUTEHUB_REPORT_TOKEN"] for e in envs} == {"chrt_from_the_service"}   # not the user's
    assert {e["COMPUTEHUB_URL"] for e in envs} == {"http://hub.example/services/computehub"}  # the launcher's
    assert {(e["COMPUTEHUB_ARRAY_ID"], e["COMPUTEHUB_ARRAY_TASK_ID"], e["COMPUTEHUB_ARRAY_TASK_COUNT"])
            for e in envs} == {("w0", "7", "10")}                                 # its index, not the user's
    ckpt = envs[0]["COMPUTEHUB_CHECKPOINT_DIR"]
    assert ckpt == str(root / "homes" / "alice" / ".computehub" / "checkpoints" / "w1") and os.path.isdir(ckpt)


def test_a_failing_worker_stops_the_gang_and_reports_its_code_and_last_lines(root):
    lch = launcher(root)
    code = ("import os, sys, time\n"
            "if os.environ['RANK'] == '1':\n"
            "    while not os.path.exists('rank0.pid'): time.sleep(0.05)\n"
            "    print('rank 1 gives up', flush=True); sys.exit(2)\n"
            "open('rank0.pid', 'w').write(str(os.getpid())); time.sleep(60)\n")
    w = workload("w2", py(code), root, workers=2)

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    t0 = time.monotonic()
    ended = run(go())
    assert ended.exit_code == 2 and ended.reason == "worker 1 exited with code 2; the other workers were stopped", ended
    assert "[worker 1] rank 1 gives up" in ended.last_lines          # marked with its worker (local_logs.py)
    assert time.monotonic() - t0 < 50                                      # rank 0 did not sleep its minute
    pid = int((root / "rank0.pid").read_text())
    assert not alive(pid) and not group_alive(pid)


def test_stop_is_sigterm_then_sigkill_after_the_grace_for_the_whole_group(root):
    lch = launcher(root)
    graceful = workload("w3", "trap 'echo saving; exit 0' TERM; sleep 60 & wait", root)
    stubborn = workload("w4", "trap '' TERM; sleep 60 & echo $! > child.pid; wait", root)

    async def go():
        await lch.start(graceful)
        await lch.start(stubborn)
        await asyncio.sleep(0.5)
        t = time.monotonic()
        e1 = await lch.stop(graceful, 10)
        quick = time.monotonic() - t
        t = time.monotonic()
        e2 = await lch.stop(stubborn, 1.0)
        return e1, quick, e2, time.monotonic() - t
    e1, quick, e2, slow = run(go())
    assert "saving" in e1.last_lines and quick < 10        # it ended by itself on SIGTERM, before the grace
    assert slow >= 1.0                                     # it ignored SIGTERM: killed after the grace
    child = int((root / "child.pid").read_text())
    assert not alive(child)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_new_launcher_adopts_running_work_and_learns_exit_codes(root):
    first = launcher(root)
    flag = root / "go"
    w = workload("w5", py(f"import os, sys, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)\n"
                          "sys.exit(4)"), root)
    run(first.start(w))
    second = launcher(root)                                # a restarted launcher: not the job's parent

    async def go():
        assert await second.adopt(w)
        assert await second.poll(w) is None
        flag.write_text("")
        return await until_ended(second, w)
    ended = run(go())
    assert ended.exit_code == 4 and "exited with code 4" in ended.reason
    assert not run(launcher(root).adopt(w))                # ended work leaves no record behind
    first._runs["w5"].workers[0].proc.wait()


def test_the_cell_becomes_a_script(root):
    lch = launcher(root)
    w = workload("w6", [sys.executable, "{script}", "x"], root,
                 script="import sys\nprint('cell says', sys.argv[1])\n")
    ended = run(_start_and_wait(lch, w))
    assert ended.exit_code == 0 and "cell says x" in ended.last_lines


async def _start_and_wait(lch, w):
    await lch.start(w)
    return await until_ended(lch, w)


def test_workdir_must_be_inside_home_or_allowed_roots(root):
    lch = launcher(root)
    (root / "escape").symlink_to("/etc")
    for bad, says in ((str(root / "escape"), "outside the folders jobs may run in"),
                      ("/tmp", "outside the folders jobs may run in"),
                      (str(root / "nope"), "does not exist"),
                      ("relative/dir", "must be an absolute path")):
        with pytest.raises(LaunchError, match=says):
            run(lch.start(workload("w7", ["true"], root) | {"metadata": {"job": {"command": ["true"],
                                                                                   "workdir": bad}}}))
    # An allowed root that is also the home is named once (the demo's case).
    home = str(root / "homes" / "alice")
    with pytest.raises(LaunchError) as e:
        run(LocalLauncher(logs_dir=str(root / "logs"), allowed_roots=[home], allow_launcher_user=True, max_uid=65534,
                          home_template=str(root / "homes" / "{username}")).start(
            workload("w7", ["true"], root) | {"metadata": {"job": {"command": ["true"], "workdir": "/tmp"}}}))
    assert str(e.value).endswith(f"outside the folders jobs may run in: {home}"), e.value
    with pytest.raises(LaunchError, match="nothing to run"):
        run(lch.start({"id": "w8", "user": "alice", "kind": "training", "metadata": {}}))
    with pytest.raises(LaunchError, match="list of arguments"):
        job_of({"metadata": {"job": {"command": [1, 2]}}})


def test_identity_os_account_when_root_and_never_a_system_account(root):
    lch = launcher(root)
    w = workload("w9", "id -u > uid", root, user="nobody")
    ended = run(_start_and_wait(lch, w))
    assert ended.exit_code == 0, ended
    expected = pwd.getpwnam("nobody").pw_uid if os.getuid() == 0 else os.getuid()
    assert int((root / "uid").read_text()) == expected
    if os.getuid() == 0:
        with pytest.raises(LaunchError, match="system account"):
            run(lch.start(workload("w10", ["true"], root, user="daemon")))
    demo_off = launcher(root, allow_launcher_user=False)
    with pytest.raises(LaunchError, match="no OS account"):
        run(demo_off.start(workload("w11", ["true"], root, user="no-such-account-here")))
    # Unless told otherwise (the demo does), a root launcher never runs a job as root.
    default = LocalLauncher(logs_dir=str(root / "logs"), allowed_roots=[str(root)])
    assert default.allow_launcher_user is (os.getuid() != 0)
    if os.getuid() == 0:
        with pytest.raises(LaunchError, match=r"no OS account .*launcher's user \(root\)"):
            run(default.start(workload("w12", "id -u > uid12", root, user="no-such-account-here")))
        assert not (root / "uid12").exists()
        # nobody (65534) is above the accounts people get (max_uid 60000): refused by default.
        nobody_uid = pwd.getpwnam("nobody").pw_uid
        with pytest.raises(LaunchError, match=rf"system account \(uid {nobody_uid}, outside 1000-60000\)"):
            run(default.start(workload("w13", "id -u > uid13", root, user="nobody")))
        assert not (root / "uid13").exists()


def test_links_planted_in_a_users_folders_lead_nowhere(root):
    """The launcher makes a job's folders and writes its script as the job's own account: a link
    the user planted there leads only where the user may write anyway. (nobody's home does not
    exist, so its jobs' folders lie under the working directory.)"""
    lch = launcher(root)
    secret, vault = root / "secret", root / "vault"
    secret.write_text("root's\n")
    secret.chmod(0o644)
    vault.mkdir(mode=0o755)
    jobs = root / ".computehub" / "jobs" / "w20"
    jobs.mkdir(parents=True)
    (jobs / "script.py").symlink_to(secret)                          # the script "saved" over a file
    w20 = workload("w20", ["python3", "{script}"], root, user="nobody", script="print('hi')\n")
    w21 = workload("w21", ["true"], root, user="nobody")
    if os.getuid() == 0:          # the launcher switches to nobody, who may not write root's files
        with pytest.raises(LaunchError, match="could not prepare the job's folders as nobody"):
            run(lch.start(w20))
        assert secret.read_text() == "root's\n" and secret.stat().st_uid == 0
        (root / ".computehub" / "checkpoints").symlink_to(vault)    # folders made in root's folder
        with pytest.raises(LaunchError, match="could not prepare the job's folders as nobody"):
            run(lch.start(w21))
        assert list(vault.iterdir()) == []
    else:                         # demo mode: the job is the launcher's own user; links are its own
        ended = run(_start_and_wait(lch, w20))
        assert ended.exit_code == 0 and secret.read_text() == "print('hi')\n"


def test_an_inference_endpoint_is_the_jobs_own_listener_only(root):
    """A user may name the port an inference service listens on; what answers there counts as
    the service only if the job's own processes hold it: not the hub's, not someone else's."""
    import http.server
    import threading

    from spawner.process_groups import free_port

    other = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    lch = launcher(root)
    squatter = workload("w30", ["sleep", "30"], root, kind="inference", port=other.server_port)
    own = workload("w31", "exec python3 -m http.server $PORT --bind 127.0.0.1", root, kind="inference")

    async def go():
        await lch.start(squatter)
        await lch.start(own)
        try:
            deadline, url = time.monotonic() + 20, None
            while url is None and time.monotonic() < deadline:
                url = await lch.ready(own)
                await asyncio.sleep(0.2)
            return url, await lch.ready(squatter)
        finally:
            await lch.stop(squatter, 1)
            await lch.stop(own, 1)
    try:
        url, squatted = run(go())
    finally:
        other.shutdown()
    assert url is not None and url.startswith("http://127.0.0.1:"), url
    assert squatted is None          # the port answers HTTP, but not from the job


def test_the_launchers_note_starts_a_line_of_its_own(root):
    lch = launcher(root)
    w = workload("w7n", py("import sys\nsys.stdout.write('half a line'); sys.stdout.flush()\nsys.exit(3)"), root)
    ended = run(_start_and_wait(lch, w))
    assert ended.exit_code == 3
    lines = open(lch.log_path(w)).read().splitlines()
    assert lines[-2] == "half a line" and lines[-1].startswith("[computehub] ") \
        and lines[-1].endswith("the job exited with code 3"), lines
