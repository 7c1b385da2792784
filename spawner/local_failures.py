"""Why a local job ended or could not start, in words a person can act on (no processes
started here: the local launcher, spawner/launch_local.py, reports what this says).

A worker runs under a small ``sh`` wrapper (``WRAPPER``, running as the job's own account, in
its working directory, with its environment): before it runs the command it checks that the
program exists, is executable and that its ``#!`` line names an interpreter that exists, and
otherwise says so in one line, in the log and in the exit file (``127 why`` / ``126 why``),
instead of the shell's terse "not found". Exit codes follow the service's convention (and
Kubernetes'): a worker killed by signal N ended with 128+N. See docs/launchers.md ("When a
job fails").
"""

from __future__ import annotations

import errno
import os
import signal

# What a signal most likely means for a training job or a service.
SIGNAL_HINTS = {
    signal.SIGKILL: "out of memory? see dmesg",
    signal.SIGSEGV: "segmentation fault, a crash in native code",
    signal.SIGBUS: "bus error, shared memory (/dev/shm) full?",
    signal.SIGABRT: "aborted, a failed assertion or a fatal C++/CUDA error",
    signal.SIGFPE: "arithmetic error",
    signal.SIGILL: "illegal instruction, built for another CPU?",
    signal.SIGTERM: "terminated from outside ComputeHub",
    signal.SIGINT: "interrupted",
    signal.SIGHUP: "hangup",
    signal.SIGPIPE: "wrote to a closed pipe",
    signal.SIGXCPU: "CPU time limit (ulimit -t)",
    signal.SIGXFSZ: "file size limit (ulimit -f)",
}

# The worker's command runs under sh so its exit code lands in a file: a launcher that
# restarts while the job runs is no longer its parent and could not learn it otherwise.
# When the command could not be run (the shell's 126 or 127), ``chk`` (its own positional
# parameters) finds out why; a problem is one line in the log ("[computehub] ...") and
# "<code> <why>" in the exit file. Only then: checking every program before it runs cost each
# job a fork, which the Slurm benchmark's thousand short jobs showed (bench/README).
# The shell is a child subreaper (process_groups.child_subreaper): what the job leaves running
# becomes its child when its parent ends, whatever its session, group or environment. So after
# the exit file it stays while it has children, for the launcher to find them (``descendants``)
# and stop them; one read of /proc when the job left nothing. Its own `sleep` (``LINGER``) is
# not the job's.
WRAPPER = r'''
say() { printf '[computehub] %s\n' "$2" >&2; printf '%s %s\n' "$1" "$2" > "$COMPUTEHUB_EXIT_FILE"; exit "$1"; }
chk() {
  case $1 in
    */*) p=$1 ;;
    *) p=$(command -v -- "$1") || say 127 "$1: no such program (not in PATH=$PATH)"
       case $p in */*) ;; *) return 0 ;; esac ;;
  esac
  [ -e "$p" ] || say 127 "$1: no such file (working directory $PWD)"
  [ -d "$p" ] && say 126 "$1 is a directory, not a program"
  [ -x "$p" ] || say 126 "$1 is not executable (chmod +x it, or run it with its interpreter)"
  [ -r "$p" ] || return 0
  IFS= read -r first < "$p" 2>/dev/null || [ -n "$first" ] || return 0
  case $first in '#!'*) ;; *) return 0 ;; esac
  case $first in *"$(printf '\r')") say 126 "$1: its #! line ends in a carriage return (Windows line endings: run dos2unix on it)" ;; esac
  set -f; set -- ${first#??}; set +f
  [ -n "$1" ] || say 126 "$p: its #! line names no interpreter"
  [ -e "$1" ] || say 127 "$p: its #! line names $1, which does not exist"
  [ -x "$1" ] && [ ! -d "$1" ] || say 126 "$p: its #! line names $1, which is not executable"
}
[ -d "$PWD" ] && [ -x . ] || say 126 "its working directory $PWD is gone, or the account $USER may not enter it"
"$@"; rc=$?
case $rc in 126|127) chk "$1" ;; esac
echo $rc > "$COMPUTEHUB_EXIT_FILE"
while k=; read -r k 2>/dev/null < "/proc/$$/task/$$/children"; [ -n "$k" ]; do sleep 0.2; done
exit $rc
'''
LINGER = b"sleep\x000.2\x00"      # /proc/<pid>/cmdline of the wrapper's own sleep while it stays


def read_exit_file(path: str) -> tuple[int, str] | None:
    """What the wrapper wrote: (exit code, why it could not run the program or ''); None if
    nothing (still running, or the wrapper itself was killed)."""
    try:
        with open(path) as f:
            code, _, why = f.read().strip().partition(" ")
        return int(code), why.strip()
    except (OSError, ValueError):
        return None


def signal_of(code: int) -> signal.Signals | None:
    if 128 < code < 128 + 65:
        try:
            return signal.Signals(code - 128)
        except ValueError:
            return None
    return None


def exit_reason(who: str, code: int, why: str = "") -> str:
    """``who`` ("the job", "worker 1", "the service") ended with ``code``: what that means.
    ``why``: what the wrapper said when it could not run the program."""
    if why:
        return f"{who} could not run: {why}"
    sig = signal_of(code)
    if sig is not None:
        hint = SIGNAL_HINTS.get(sig)
        return f"{who} was killed by signal {sig.value} ({sig.name}{': ' + hint if hint else ''})"
    if code == 127:
        return f"{who} exited with code 127 (a command was not found: see the last lines)"
    if code == 126:
        return f"{who} exited with code 126 (a command could not be run: not executable?)"
    return f"{who} exited with code {code}"


def start_error(e: OSError, what: str) -> str:
    """An OSError of the launcher while starting a job, as one line: ``what`` it was doing,
    the file and the system's words, and who is to fix it where that is not the user."""
    text = f"{what}: {e.filename}: {e.strerror or e}" if e.filename else f"{what}: {e.strerror or e}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        text += " (the disk is full: an operator must free space)"
    elif e.errno == errno.EROFS:
        text += " (a read-only file system)"
    return text


def disk_full(path: str) -> bool:
    """Whether the file system of ``path`` is (all but) full for ordinary users: under 2% of it
    and under 16 MiB left (what a job that died of it left may be a little more than nothing),
    or no inodes left."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    left, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return left < min(16 * 2**20, size * 0.02) or (st.f_favail == 0 and st.f_files > 0)
