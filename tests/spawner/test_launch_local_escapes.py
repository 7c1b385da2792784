"""What a local job leaves running after it has covered its tracks: a daemon that left the job's
session and process group (``setsid``, a double fork) and cleared its environment, so neither
the job's process group nor its $COMPUTEHUB_EXIT_FILE finds it. Such a process still holds what
the job held (its GPUs' memory). Each worker's shell is a child subreaper, so the daemon becomes
its child when its parent ends, and the launcher stops it: when the job ends, when it is
stopped (cancel, preemption), and after a launcher restart. Real processes and signals, no hub.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal

from test_launch_local import alive, launcher, py, root, run, until_ended, workload  # noqa: F401 - root: fixture
from test_launch_local_failures import wait_file

from spawner.process_groups import descendants

# Fork, leave the session, fork again, and run `sleep` with an empty environment; the middle
# process waits until the daemon is `sleep` (on a loaded machine the launcher could otherwise
# see it between fork and exec, still named python), writes its pid and exits, so the daemon's
# parent is gone before the job itself ends.
DAEMONIZE = f"""import os, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()
    g = os.fork()
    if g == 0:
        os.execve({shutil.which("sleep")!r}, ["sleep", "303"], {{}})
    deadline = time.monotonic() + 10
    while open(f"/proc/{{g}}/comm").read().strip() != "sleep" and time.monotonic() < deadline:
        time.sleep(0.005)
    open(sys.argv[1], "w").write(str(g))
    os._exit(0)
os.waitpid(pid, 0)
"""


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


def test_a_daemon_with_no_trace_of_the_job_is_stopped_when_the_job_ends(root):
    lch = launcher(root)
    w = workload("e1", py(DAEMONIZE + "print('done', flush=True)\n") + ["e1.pid"], root)

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    ended = run(go())
    daemon = int((root / "e1.pid").read_text())
    assert ended.exit_code == 0 and ended.reason.startswith(
        f"exit code 0; it left 1 process(es) running after it exited ({daemon} (sleep)): stopped"), ended
    assert not alive(daemon)


def test_such_a_daemon_is_stopped_with_its_job(root):
    lch = launcher(root)
    w = workload("e2", py(DAEMONIZE + "time.sleep(300)\n") + ["e2.pid"], root)

    async def go():
        await lch.start(w)
        daemon = int(wait_file(root / "e2.pid"))
        # It is what the test says: no environment of the job's, its own session, not our child.
        assert _environ(daemon) == b"" and daemon in descendants(lch._runs["e2"].workers[0].pid)
        return daemon, await lch.stop(w, 5)
    daemon, ended = run(go())
    assert ended.reason == "stopped (SIGTERM, 5 s grace)", ended
    assert not alive(daemon)


def test_a_restarted_launcher_finds_it_too(root):
    first = launcher(root)
    flag = root / "go"
    w = workload("e3", py(DAEMONIZE + f"while not os.path.exists({str(flag)!r}): time.sleep(0.05)\n")
                 + ["e3.pid"], root)
    run(first.start(w))
    daemon = int(wait_file(root / "e3.pid"))
    second = launcher(root)                                # not the job's parent

    async def go():
        assert await second.adopt(w)
        flag.write_text("")
        return await until_ended(second, w)
    ended = run(go())
    assert "it left 1 process(es) running after it exited" in ended.reason and f"{daemon} (sleep)" in ended.reason
    assert not alive(daemon)
    first._runs["e3"].workers[0].proc.wait()


def test_a_job_that_leaves_nothing_ends_as_before(root):
    """The worker's shell stays only while it has children: a job that leaves nothing ends at once."""
    lch = launcher(root)
    w = workload("e4", py("print('hi')"), root)

    async def go():
        await lch.start(w)
        shell = lch._runs["e4"].workers[0].proc
        ended = await until_ended(lch, w)
        await asyncio.sleep(0)
        return shell, ended
    shell, ended = run(go())
    assert ended.reason == "exit code 0", ended
    assert shell.wait(5) == 0


def test_with_find_escaped_off_only_the_old_traces_find_it(root):
    """The admin's knob (it saves each start a full fork): such a daemon is then missed."""
    lch = launcher(root, find_escaped=False)
    w = workload("e5", py(DAEMONIZE) + ["e5.pid"], root)

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    ended = run(go())
    daemon = int((root / "e5.pid").read_text())
    try:
        assert ended.reason == "exit code 0" and alive(daemon), ended
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_the_shells_own_fork_is_not_taken_for_something_the_job_left(tmp_path):
    """After the job ends, its worker's shell forks ``sleep 0.2`` while it waits for what the job
    left; caught between the fork and the exec, that child still has the shell's command line.
    It is the shell's own, not the job's (seen once in CI as a third "left" process)."""
    import subprocess
    import sys
    import time

    from spawner.local_runs import _lingering
    code = "import os, sys, time\nif os.fork() == 0:\n    time.sleep(30)\nsys.stdout.write('x\\n'); sys.stdout.flush()\n" \
           "time.sleep(30)\n"
    shell = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    job = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        shell.stdout.readline()                           # it has forked
        deadline = time.monotonic() + 10
        while not (forks := descendants(shell.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(forks) == 1
        assert _lingering(forks[0], {shell.pid})         # a fork of the shell, not yet anything else
        assert not _lingering(forks[0], {job.pid})       # ... only of a worker's shell
        assert not _lingering(job.pid, {shell.pid})      # not the shell's child
    finally:
        for p in (shell, job):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
