"""py-spy profiling of the service process while a benchmark runs (used by api_load.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def start_profile(hub, args):
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(spy):
        print("  (py-spy not found: pip install py-spy)")
        return None
    out = Path(args.profile_out)
    cmd = [spy, "record", "-p", str(hub.service_pid()), "-d", str(int(args.warmup + args.duration)),
           "-r", "200", "-f", "raw", "-o", str(out), "--nonblocking", "--idle"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out


def finish_profile(task) -> None:
    proc, out = task
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    summarize_profile(out)


def summarize_profile(path: Path, top: int = 25) -> None:
    """Shares of the service's main thread (the event loop) by function, from py-spy's raw
    (collapsed stacks) output recorded with --idle: time blocked in a system call (an fsync
    under a COMMIT, waiting in epoll) counts, since it holds up the loop all the same."""
    if not path.exists():
        print(f"  (no profile written to {path})")
        return
    total = 0
    incl: dict[str, int] = {}
    self_: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack.startswith("_run_module_as_main"):    # other threads (executors, ...)
            continue
        n = int(n)
        total += n
        frames = [re.sub(r" \((?:.*/)?([^/:]+)(?::\d+)?\)$", r" (\1)", f) for f in stack.split(";")]
        for f in set(frames):
            incl[f] = incl.get(f, 0) + n
        self_[frames[-1]] = self_.get(frames[-1], 0) + n
    if not total:
        print(f"  (no main-thread samples in {path})")
        return
    print(f"\nprofile of the service's event-loop thread ({total} samples at 200/s, idle included; {path}):")
    print(f"  {'inclusive':>9}  function")
    shown = [(f, n) for f, n in sorted(incl.items(), key=lambda kv: -kv[1]) if n < 0.98 * total]
    for f, n in shown[:top]:
        print(f"  {100 * n / total:8.1f}%  {f}")
    print(f"  {'self':>9}  function")
    for f, n in sorted(self_.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {100 * n / total:8.1f}%  {f}")
