"""A throw-away Slurm cluster on 127.0.0.1 for the end-to-end benchmark (bench/slurm.py).

Debian's slurm-wlm (22.05) without systemd: munged started by hand with its own key,
socket and pid file; one slurmctld; one ``slurmd -N gpuNNN`` per emulated node, all on
127.0.0.1 with their own ports; ``Gres=gpu:8`` per node with a gres.conf whose device
files are symlinks to /dev/null (Slurm drops GPUs without files); select/cons_tres and
sched/backfill. Everything lives in a temporary folder and every process is stopped by
its PID. Installs the packages with apt-get when they are missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_installed() -> None:
    if all(shutil.which(x) for x in ("slurmctld", "slurmd", "sbatch", "munged")):
        return
    print("installing Slurm: apt-get install -y " + " ".join(PACKAGES), flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        r = subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"apt-get install {' '.join(PACKAGES)} failed: {r.stderr[-500:]}")


class SlurmCluster:
    def __init__(self, workdir: Path, nodes: int = 16, gpus: int = 8, cpus: int = 64):
        self.dir = Path(workdir)
        self.nodes, self.gpus, self.cpus = nodes, gpus, cpus
        self.names = [f"gpu{i:03d}" for i in range(1, nodes + 1)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.munged_pid: int | None = None
        self.conf = self.dir / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    # --- files -----------------------------------------------------------------------------

    def _write(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "munge", "dev", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        os.chmod(d / "munge", 0o755)          # munged wants its socket's folder reachable (o+x)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        for i in range(self.gpus):
            dev = d / "dev" / f"nvidia{i}"
            if not dev.exists():
                dev.symlink_to("/dev/null")    # a character device: Slurm keeps the GPU
        ports = [free_port() for _ in range(self.nodes)]
        ctld_port = free_port()
        # Node ports must be a contiguous range in one NodeName line; give each node its own line.
        node_lines = "\n".join(
            f"NodeName={n} NodeAddr=127.0.0.1 Port={p} CPUs={self.cpus} RealMemory=65536 Gres=gpu:{self.gpus} "
            f"State=UNKNOWN" for n, p in zip(self.names, ports))
        self.conf.write_text(f"""\
ClusterName=chbench
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d / 'munge' / 'munge.socket'}
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'spool'}/slurmd-%n.pid
SlurmctldLogFile={d / 'log' / 'slurmctld.log'}
SlurmdLogFile={d / 'log'}/slurmd-%n.log
SlurmctldDebug=error
SlurmdDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc={d / 'log' / 'jobcomp.txt'}
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MaxJobCount=100000
MinJobAge=2
{node_lines}
PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (d / "gres.conf").write_text(
            "AutoDetect=off\n" + "".join(
                f"NodeName={n} Name=gpu File={d / 'dev'}/nvidia[0-{self.gpus - 1}]\n" for n in self.names))

    # --- processes ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "SlurmCluster":
        ensure_installed()
        self._write()
        d = self.dir
        m = d / "munge"
        subprocess.run(["munged", "--force", f"--socket={m / 'munge.socket'}", f"--key-file={m / 'munge.key'}",
                        f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                        f"--seed-file={m / 'munged.seed'}"], check=True, capture_output=True)
        self.munged_pid = int((m / "munged.pid").read_text().strip())
        log = open(d / "log" / "daemons.out", "ab")
        self.procs["slurmctld"] = subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(self.conf)], env=self.env,
                                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        for n in self.names:
            self.procs[n] = subprocess.Popen(["slurmd", "-D", "-N", n, "-f", str(self.conf)], env=self.env,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            dead = [k for k, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Slurm daemon {dead[0]} exited: {self.tail()}")
            states = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
            if len(states) == self.nodes and all(s == "idle" for s in states):
                return self
            time.sleep(0.3)
        raise RuntimeError(f"Slurm nodes did not become idle: {self.run('sinfo', '-N', check=False).stdout} "
                           f"{self.tail()}")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, check=check, timeout=120)

    def tail(self, n: int = 2000) -> str:
        out = []
        for f in ("slurmctld.log", "daemons.out"):
            try:
                out.append((self.dir / "log" / f).read_text(errors="replace")[-n:])
            except OSError:
                pass
        return "\n".join(out)

    def pids(self) -> dict[str, int]:
        return {k: p.pid for k, p in self.procs.items() if p.poll() is None}

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 15
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        if self.munged_pid:
            _stop_daemon(self.munged_pid)
            self.munged_pid = None

    def __enter__(self) -> "SlurmCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_daemon(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM a daemon that is not our child (munged forks away) and wait until it is gone:
    it removes its socket and pid file on the way out, which would race the removal of its
    folder. SIGKILL if it outlives ``timeout`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
