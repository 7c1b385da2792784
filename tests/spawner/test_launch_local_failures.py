"""How local jobs fail, and what the local launcher backend says about it: real processes, real
signals, real files, no hub (tests/spawner/test_launcher_local_failures_hub.py shows the same
reasons reaching the service).

Emulated: GPUs (only passed on in CUDA_VISIBLE_DEVICES); the kernel's OOM killer, by sending
the job SIGKILL (what the OOM killer sends); a full disk, by a small tmpfs mounted for the test
(those tests need root, as `make test` runs in CI, and fail loudly without it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launch_local import alive

from spawner.launch_base import LaunchError
from spawner.launch_local import LocalLauncher
from spawner.process_groups import group_alive
from test_launch_local import root, run, until_ended, workload  # noqa: F401 - root: the same fixture


@pytest.fixture
def tiny_disk(root):
    """A 256 KiB tmpfs: a disk that fills up."""
    mnt = root / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.fail("this test mounts a small tmpfs (needs root, as `make test` runs in CI)", pytrace=False)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def launcher(root: Path, **kw) -> LocalLauncher:
    kw.setdefault("allow_launcher_user", True)      # "alice" has no OS account: demo mode
    kw.setdefault("max_uid", 65534)     # the tests' OS account is nobody's, as an admin may allow
    kw.setdefault("logs_dir", str(root / "logs"))
    return LocalLauncher(allowed_roots=[str(root)], home_template=str(root / "homes" / "{username}"), **kw)


async def start_and_wait(lch, w, timeout=30.0):
    await lch.start(w)
    return await until_ended(lch, w, timeout)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_file(path: Path, timeout=20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_killed_by_a_signal_says_which_and_what_it_likely_means(root):
    """The OOM killer (emulated: SIGKILL), `kill -9` by the user, a segfault: exit code 128+N."""
    lch = launcher(root)
    oom = workload("s1", py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), root)
    segv = workload("s2", py("import ctypes; ctypes.string_at(0)"), root)
    outside = workload("s3", py("import os, time; open('s3.pid', 'w').write(str(os.getpid())); time.sleep(60)"),
                       root)

    async def go():
        e1 = await start_and_wait(lch, oom)
        e2 = await start_and_wait(lch, segv)
        await lch.start(outside)
        os.kill(int(await asyncio.to_thread(wait_file, root / "s3.pid")), signal.SIGKILL)   # the user's kill -9
        return e1, e2, await until_ended(lch, outside)
    e1, e2, e3 = run(go())
    assert (e1.exit_code, e1.reason) == (137, "the job was killed by signal 9 (SIGKILL: out of memory? see dmesg)")
    assert e2.exit_code == 139 and e2.reason.startswith("the job was killed by signal 11 (SIGSEGV: segmentation"), e2
    assert (e3.exit_code, e3.reason) == (137, e1.reason)
    # ... said in its log too (what %submit's display and `computehub logs` show), not twice in the reason
    last = (root / "logs" / "s1.log").read_text().splitlines()[-1]
    assert last.startswith("[computehub] ") and last.endswith(e1.reason), last
    assert not any(e1.reason in line for line in e1.last_lines), e1.last_lines


def test_a_program_that_cannot_run_says_why_in_one_line(root):
    (root / "plain.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "plain.sh").chmod(0o644)
    (root / "badline.sh").write_text("#!/no/such/interpreter\necho hi\n")
    (root / "crlf.sh").write_bytes(b"#!/bin/sh\r\necho hi\r\n")
    for f in ("badline.sh", "crlf.sh"):
        (root / f).chmod(0o755)
    (root / "adir").mkdir()
    cases = {
        "p1": (["no-such-program", "--x"], 127, "the job could not run: no-such-program: no such program (not in PATH="),
        "p2": ([str(root / "gone.py")], 127, f"the job could not run: {root}/gone.py: no such file"),
        "p3": ([str(root / "plain.sh")], 126, f"the job could not run: {root}/plain.sh is not executable (chmod +x"),
        "p4": ([str(root / "badline.sh")], 127,
               f"the job could not run: {root}/badline.sh: its #! line names /no/such/interpreter, which does not exist"),
        "p5": (["./crlf.sh"], 126, "the job could not run: ./crlf.sh: its #! line ends in a carriage return"),
        "p6": ([str(root / "adir")], 126, f"the job could not run: {root}/adir is a directory"),
        "p7": ("no-such-thing-either", 127, "the job exited with code 127 (a command was not found"),
    }
    lch = launcher(root)
    for wid, (cmd, code, says) in cases.items():
        ended = run(start_and_wait(lch, workload(wid, cmd, root)))
        assert ended.exit_code == code and ended.reason.startswith(says), (wid, ended)
        assert "Traceback" not in "\n".join(ended.last_lines)
        if wid != "p7":         # the same line is in its log, where `computehub logs` shows it
            assert any(line.startswith("[computehub] ") and says.split("could not run: ")[1] in line
                       for line in ended.last_lines), ended.last_lines


def test_a_working_directory_the_account_cannot_enter(root):
    """As root: the job of the account nobody, in a folder that account may not enter, fails with that said."""
    if os.getuid() != 0:
        pytest.fail("this test runs a job as another account (needs root, as `make test` runs in CI)",
                    pytrace=False)
    private = root / "private"
    private.mkdir(mode=0o700)
    lch = launcher(root, run_dir_template=str(root / "runs" / "{id}"),
                   checkpoint_dir_template=str(root / "ckpt" / "{id}"))
    ended = run(start_and_wait(lch, workload("d1", ["true"], private, user="nobody")))
    assert ended.exit_code == 126, ended
    assert ended.reason == (f"the job could not run: its working directory {private} is gone, or the account "
                            "nobody may not enter it")


def test_folders_that_cannot_be_made_fail_the_start_with_the_reason(root):
    (root / "afile").write_text("")
    lch = launcher(root, run_dir_template=str(root / "afile" / "{id}"))
    with pytest.raises(LaunchError, match=rf"^could not prepare the job's folders: {root}/afile/f1: Not a directory"):
        run(lch.start(workload("f1", ["true"], root)))


def test_a_log_that_cannot_be_written_fails_the_start_and_leaves_nothing_running(root):
    (root / "afile").write_text("")
    lch = launcher(root, logs_dir=str(root / "afile" / "logs"), state_dir=str(root / "state"))
    with pytest.raises(LaunchError, match="^the launcher cannot write the job's log: .*Not a directory"):
        run(lch.start(workload("l1", ["true"], root)))
    # The processes' record cannot be written (after the workers started): they are stopped again.
    lch = launcher(root)
    os.makedirs(os.path.join(lch.state_dir, "l2.json.tmp"))
    w = workload("l2", py("import os, time; open('l2.pid', 'w').write(str(os.getpid())); time.sleep(60)"), root)
    with pytest.raises(LaunchError, match="^the launcher cannot record the job's processes: .*Is a directory"):
        run(lch.start(w))
    pid = (root / "l2.pid").read_text() if (root / "l2.pid").exists() else None
    assert pid is None or not alive(int(pid))


def test_a_full_disk_at_start_and_while_it_runs(root, tiny_disk):
    """A full disk (a small tmpfs) under the logs: the start fails saying so; a job whose output
    fills it dies of it (it writes its log itself), and its reason says the disk is full."""
    lch = launcher(root, logs_dir=str(tiny_disk / "logs"))
    w = workload("df1", py("import time\nfor i in range(100000): print('x' * 1000)\ntime.sleep(60)"), root)
    ended = run(start_and_wait(lch, w))
    assert ended.exit_code != 0 and "the disk of its log is full" in ended.reason, ended
    fill(tiny_disk / "filler")
    lch = launcher(root, logs_dir=str(tiny_disk / "logs"), state_dir=str(root / "state"))
    with pytest.raises(LaunchError, match=r"^the launcher cannot write the job's log: No space left on device "
                                          r"\(the disk is full: an operator must free space\)$"):
        run(lch.start(workload("df2", ["true"], root)))
    lch = launcher(root, state_dir=str(tiny_disk / "state"))
    with pytest.raises(LaunchError, match=r"^the launcher cannot record the job's processes: .*No space left on device"):
        run(lch.start(workload("df4", ["true"], root)))
    full = launcher(root, run_dir_template=str(tiny_disk / "jobs" / "{id}"))
    with pytest.raises(LaunchError, match=r"^could not prepare the job's folders: .*No space left on device \(the "):
        run(full.start(workload("df3", ["true"], root, script="x = 1\n" * 10000)))


def fill(path: Path) -> None:
    """Write ``path`` until its disk is full."""
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 512)
        except OSError:
            pass


def test_an_inference_service_that_never_answers_is_stopped_after_ready_timeout(root):
    lch = launcher(root, ready_timeout=1.0)
    w = workload("i1", "echo listening nowhere; exec sleep 60", root, kind="inference")

    async def go():
        await lch.start(w)
        pid = lch._runs["i1"].workers[0].pid
        while (ended := await lch.poll(w)) is None:
            assert await lch.ready(w) is None
            await asyncio.sleep(0.1)
        return ended, pid
    ended, pid = run(go())
    assert ended.exit_code == 1 and ended.final, ended
    assert ended.reason.startswith("the service did not answer HTTP on port ") and \
        "within 1 s (LocalLauncher.ready_timeout)" in ended.reason, ended.reason
    assert not group_alive(pid)
    assert LocalLauncher().ready_timeout == 600


def test_a_gang_names_the_worker_that_failed_first(root):
    """Worker 1 is killed (SIGKILL: the OOM killer, emulated); worker 0 then fails too (as
    torch.distributed would) before the launcher looks, and worker 2 runs on until stopped."""
    code = ("import os, sys, time, signal\n"
            "r = os.environ['RANK']\n"
            "if r == '1': os.kill(os.getpid(), signal.SIGKILL)\n"
            "if r == '0':\n"
            "    while not os.path.exists('exit1'): time.sleep(0.02)\n"
            "    time.sleep(0.3); open('w0-done', 'w').write('1'); sys.exit(1)\n"
            "open('w2.pid', 'w').write(str(os.getpid())); time.sleep(60)\n")
    lch = launcher(root, run_dir_template=str(root / "{id}-run"))
    w = workload("g1", py(code.replace("exit1", str(root / "g1-run" / "exit.1"))), root, workers=3)

    async def go():
        await lch.start(w)
        await asyncio.to_thread(wait_file, root / "w0-done")
        await asyncio.sleep(0.3)
        return await until_ended(lch, w)
    ended = run(go())
    assert ended.exit_code == 137, ended
    assert ended.reason == ("worker 1 was killed by signal 9 (SIGKILL: out of memory? see dmesg); then worker 0 "
                            "exited with code 1; the other workers were stopped"), ended.reason
    assert not alive(int((root / "w2.pid").read_text()))


def test_a_job_that_ignores_sigterm_is_said_to_be_killed(root):
    lch = launcher(root)
    w = workload("t1", "trap '' TERM; echo started; sleep 60 & wait", root)

    async def go():
        await lch.start(w)
        await asyncio.sleep(0.3)
        return await lch.stop(w, 0.5)
    ended = run(go())
    assert ended.reason == "it did not exit within the 0.5 s grace after SIGTERM: killed (SIGKILL)", ended
    assert any(line.endswith(ended.reason) and line.startswith("[computehub] ") for line in ended.last_lines)
    graceful = workload("t2", "trap 'exit 0' TERM; sleep 60 & wait", root)

    async def go2():
        await lch.start(graceful)
        await asyncio.sleep(0.3)
        return await lch.stop(graceful, 10)
    assert run(go2()).reason == "stopped (SIGTERM, 10 s grace)"


def test_children_left_behind_are_stopped_and_named(root):
    """A job that exits leaving a child in its process group, or a daemon that left the group
    (setsid): both still hold what the job held (its GPUs), and are stopped."""
    lch = launcher(root)
    w = workload("c1", "sleep 300 & echo $! > c1.pid; setsid sleep 301 & echo $! > c1.daemon; echo bye", root)
    ended = run(start_and_wait(lch, w))
    assert ended.exit_code == 0 and ended.reason.startswith("exit code 0; it left 2 process(es) running after it "
                                                            "exited ("), ended
    assert ended.reason.endswith("): stopped") and "(sleep)" in ended.reason, ended.reason
    for f in ("c1.pid", "c1.daemon"):
        assert not alive(int((root / f).read_text()))


def test_a_job_killed_while_the_launcher_was_down_is_reported_as_such(root):
    first = launcher(root)
    w = workload("a1", py("import os, time; open('a1.pid', 'w').write(str(os.getpid())); time.sleep(60)"), root)
    run(first.start(w))
    os.kill(int(wait_file(root / "a1.pid")), signal.SIGKILL)          # the OOM killer, while no launcher watches
    first._runs["a1"].workers[0].proc.wait()
    second = launcher(root)

    async def go():
        assert await second.adopt(w)
        return await until_ended(second, w)
    ended = run(go())
    assert (ended.exit_code, ended.reason) == (137, "the job was killed by signal 9 (SIGKILL: out of memory? see dmesg)")


def test_what_a_start_cut_short_left_running_is_stopped_before_the_next(root):
    """The launcher is killed while it starts a job, after the processes started but before it
    recorded them (emulated: the record removed): the restarted launcher starts the job again,
    and the first start's processes must not run on beside it (holding its GPUs)."""
    first = launcher(root)
    w = workload("r1", py("import os, time; open('r1.pid.' + str(os.getpid()), 'w'); time.sleep(60)"), root)
    run(first.start(w))
    os.unlink(first._record("r1"))
    deadline = time.monotonic() + 20
    while not list(root.glob("r1.pid.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    old = int(list(root.glob("r1.pid.*"))[0].name.rsplit(".", 1)[1])
    second = launcher(root)
    try:
        run(second.start(w))
        assert not alive(old)
        assert any("an earlier start of it left running" in line for line in second.last_lines(w))
    finally:
        run(second.stop(w, 1))
        run(first.stop(w, 0))
