"""A local gang's output in the workload's log, each line marked with its worker (spawner/local_logs.py):
real processes and the real LocalLauncher, as in test_launch_local.py."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from spawner import local_logs
from spawner.launch_local import LocalLauncher
from test_launch_local import launcher, py, root, run, until_ended, workload  # noqa: F401 (root: fixture)

TALKER = ("import os, sys, time\n"
          "r = os.environ['RANK']\n"
          "for i in range(3):\n"
          "    print(f'rank {r} step {i}', flush=True); time.sleep(0.2)\n"
          "open(f'started-{r}', 'w').close()\n"
          "while not os.path.exists('go'): time.sleep(0.05)\n"
          "sys.stdout.write(f'rank {r} no newline'); sys.stdout.flush()\n")


async def until_started(lch, w, root) -> None:
    """Until both workers have written their steps (the launcher looking at the job meanwhile)."""
    deadline = time.monotonic() + 30
    while not all(os.path.exists(root / f"started-{r}") for r in (0, 1)):
        assert time.monotonic() < deadline
        assert await lch.poll(w) is None
        await asyncio.sleep(0.1)


def log_lines(lch, w) -> list[str]:
    with open(lch.log_path(w)) as f:
        return [line for line in f.read().splitlines() if not line.startswith("[computehub]")]


def test_each_workers_lines_reach_the_log_while_it_runs_marked_once_and_in_order(root):  # noqa: F811
    lch = launcher(root)
    w = workload("w1", py(TALKER), root, workers=2)

    async def go():
        await lch.start(w)
        await until_started(lch, w, root)
        assert await lch.poll(w) is None
        running = log_lines(lch, w)                     # while it runs: whole lines, each marked
        (root / "go").touch()
        return running, await until_ended(lch, w)
    running, ended = run(go())
    assert sorted(running) == sorted(f"[worker {r}] rank {r} step {i}" for r in (0, 1) for i in range(3)), running
    assert ended.exit_code == 0, ended
    lines = log_lines(lch, w)
    for r in (0, 1):
        mine = [line for line in lines if line.startswith(f"[worker {r}] ")]
        assert mine == [f"[worker {r}] rank {r} step {i}" for i in range(3)] + [f"[worker {r}] rank {r} no newline"]
    assert len(lines) == 8                                # nothing twice
    assert not [p for p in os.listdir(root / "logs") if p != "w1.log"]      # the workers' files are gone


def test_a_restarted_launcher_goes_on_where_the_last_one_stopped(root):  # noqa: F811
    first = launcher(root)
    w = workload("w2", py(TALKER), root, workers=2)

    async def go():
        await first.start(w)
        await until_started(first, w, root)               # read by the first launcher ...
        second = launcher(root)                           # ... which goes away; another adopts the job
        assert await second.adopt(w)
        assert await second.poll(w) is None
        (root / "go").touch()
        return await until_ended(second, w)
    assert run(go()).exit_code == 0
    lines = log_lines(first, w)
    assert sorted(lines) == sorted([f"[worker {r}] rank {r} step {i}" for r in (0, 1) for i in range(3)]
                                   + [f"[worker {r}] rank {r} no newline" for r in (0, 1)]), lines


def test_one_worker_writes_the_log_itself(root):  # noqa: F811
    lch = launcher(root)
    w = workload("w3", py("print('alone')"), root)

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    assert run(go()).exit_code == 0
    assert log_lines(lch, w) == ["alone"] and os.listdir(root / "logs") == ["w3.log"]


def test_only_whole_lines_until_the_end_and_a_line_longer_than_a_read(tmp_path, monkeypatch):
    monkeypatch.setattr(local_logs, "MAX_READ", 16)
    lch = LocalLauncher(logs_dir=str(tmp_path), allowed_roots=[str(tmp_path)])
    w = {"id": "w4"}
    (tmp_path / "w4.log.w0").write_bytes(b"a\nhalf")
    (tmp_path / "w4.log.w1").write_bytes(b"x" * 20 + b"\n")          # longer than one read
    lch.merge_worker_logs(w, 2, "replica")
    assert (tmp_path / "w4.log").read_text() == "[replica 0] a\n[replica 1] xxxxxxxxxxxxxxxx\n"
    with open(tmp_path / "w4.log.w0", "ab") as f:
        f.write(b" done\n")
    lch.merge_worker_logs(w, 2, "replica")
    lch.merge_worker_logs(w, 2, "replica", final=True)
    assert (tmp_path / "w4.log").read_text().splitlines() == [
        "[replica 0] a", "[replica 1] xxxxxxxxxxxxxxxx", "[replica 0] half done", "[replica 1] xxxx"]
    assert sorted(os.listdir(tmp_path)) == ["w4.log"]


@pytest.mark.parametrize("broken", ["not json", "[1, 2]"])
def test_unreadable_marks_start_over_rather_than_fail(tmp_path, broken):
    lch = LocalLauncher(logs_dir=str(tmp_path), allowed_roots=[str(tmp_path)])
    (tmp_path / "w5.log.w0").write_bytes(b"one\n")
    (tmp_path / "w5.log.workers").write_text(broken)
    lch.merge_worker_logs({"id": "w5"}, 1, "worker")
    assert (tmp_path / "w5.log").read_text() == "[worker 0] one\n"
