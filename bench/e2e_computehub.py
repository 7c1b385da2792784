"""The ComputeHub side of the end-to-end benchmark (bench/slurm.py): a real JupyterHub,
the real proxy, the ComputeHub service and ComputeHub's local launcher.

Job stream: each job is a ``training`` workload whose command is ``true`` (trivial: 1 CPU;
or 1 GPU + 1 CPU), submitted with ``POST /workloads`` through the hub's proxy by closed-loop
clients, each with its own hub token and a keep-alive connection (what batchspawner or an
SDK would do; ``sbatch`` is one process per job). The launcher
(``python -m spawner.launcher_app``, its own process, the launcher service's token) starts
admitted work as local processes and reports ``running`` and ``finished``. Times come from
the service's own timestamps (``submitted_at``, ``started_at`` = the launcher's running
report, ``ended_at``). 16 simulated nodes × 8 GPUs (no NVML on this machine: the GPUs are
declared, processes get ``CUDA_VISIBLE_DEVICES`` from their placement).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hub_ext"))

from realhub import RealHub  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def service_config(nodes: int, gpus: int, cpus: int, poll: float) -> str:
    node_list = [{"name": f"gpu{i:03d}", "gpus": gpus, "cpu": cpus, "memory": "64Gi"} for i in range(1, nodes + 1)]
    return f"""
c.ComputeHubService.cycle_interval = 5.0
c.ComputeHubService.cycle_delay = 0.05
c.ComputeHubService.nodes = {node_list!r}
c.ComputeHubService.initial_queues = [
    {{"name": "org"}},
    {{"name": "vision", "parent": "org", "guaranteed": {{"gpu": {nodes * gpus}}}, "groups": ["vision"]}},
    {{"name": "nlp", "parent": "org", "guaranteed": {{"gpu": 0}}, "groups": ["nlp"]}},
]
c.LauncherApp.poll_interval = {poll!r}
"""


class ComputeHubSide:
    def __init__(self, workdir: Path, nodes: int = 16, gpus: int = 8, cpus: int = 64, poll: float = 0.05,
                 find_escaped: bool = True):
        self.dir = Path(workdir)
        self.hub = RealHub(self.dir, extra_service_config=service_config(nodes, gpus, cpus, poll))
        self.launcher: subprocess.Popen | None = None
        self.poll, self.find_escaped = poll, find_escaped

    def start(self) -> "ComputeHubSide":
        self.hub.start()
        (self.dir / "homes").mkdir(exist_ok=True)
        cfg = self.dir / "launcher_config.py"
        cfg.write_text((self.dir / "computehub_config.py").read_text()
                       + f"\nc.LocalLauncher.home_template = {str(self.dir / 'homes' / '{username}')!r}\n"
                       + "c.LocalLauncher.allow_launcher_user = True\n"
                       + f"c.LocalLauncher.find_escaped = {self.find_escaped!r}\n")
        env = dict(os.environ, COMPUTEHUB_TOKEN=self.hub.launcher_token, PYTHONPATH=str(ROOT))
        self.launcher_log = open(self.dir / "launcher.log", "ab")
        self.launcher = subprocess.Popen(
            [sys.executable, "-m", "spawner.launcher_app", "--url", self.hub.service_url,
             "--data-dir", str(self.hub.data_dir), "--config", str(cfg)],
            cwd=self.dir, env=env, stdout=self.launcher_log, stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(1.0)
        if self.launcher.poll() is not None:
            raise RuntimeError("the launcher exited: "
                               + (self.dir / "launcher.log").read_text(errors="replace")[-1500:])
        return self

    def pids(self) -> dict[str, int | None]:
        hub_pid = self.hub.proc.pid if self.hub.proc else None
        proxy = None
        pf = self.dir / "jupyterhub-proxy.pid"
        if pf.exists():
            try:
                proxy = int(pf.read_text().strip())
            except ValueError:
                pass
        return {"service": self.hub.service_pid(), "launcher": self.launcher.pid if self.launcher else None,
                "hub": hub_pid, "proxy": proxy}

    def cpu(self) -> dict[str, float]:
        return {k: cpu_seconds(p) for k, p in self.pids().items()}

    async def _submit(self, n: int, submitters: int, gpu: bool, tag: str,
                      array: bool = False) -> tuple[float, float, int]:
        import aiohttp
        tokens = [self.hub.make_token(u) for u in (["alice", "bob", "lin", "alice"] * submitters)[:submitters]]
        url = self.hub.api + "/workloads"
        res = {"cpu": 1, "gpu": 1} if gpu else {"cpu": 1}
        counter = iter(range(1 if array else n))     # an array: one submission of n tasks
        errors = 0

        async def client(token: str):
            nonlocal errors
            async with aiohttp.ClientSession(headers={"Authorization": f"token {token}"}) as s:
                for i in counter:
                    body = {"kind": "training", "queue": "vision", "name": f"{tag}-{i}", "resources": res,
                            "metadata": {"job": {"command": ["true"]}}}
                    if array:
                        body["array"] = f"0-{n - 1}"
                    async with s.post(url, json=body) as r:
                        if r.status != 201:
                            errors += 1
                            if errors <= 3:
                                print(f"  submission refused: {r.status} {(await r.text())[:300]}", flush=True)
                        await r.read()

        t0 = time.time()
        await asyncio.gather(*(client(t) for t in tokens))
        return t0, time.time(), errors

    def phase(self, n: int, submitters: int, gpu: bool, tag: str, timeout: float = 600.0,
              array: bool = False) -> dict:
        cpu0 = self.cpu()
        t0, t1, errors = asyncio.run(self._submit(n, submitters, gpu, tag, array))
        admin = self.hub.tokens["ada"]
        deadline = time.time() + timeout
        while time.time() < deadline:     # a cheap look (one count) so polling costs the service little
            r = self.hub.call("GET", "/workloads?state=pending&state=admitted&state=running&state=preempting"
                              "&limit=1", admin, timeout=60)
            r.raise_for_status()
            if r.json()["total"] == 0:
                break
            time.sleep(0.5)
        done_at = time.time()
        cpu1 = self.cpu()
        mine, offset = [], 0
        while True:
            r = self.hub.call("GET", f"/workloads?state=finished&state=failed&limit=10000&offset={offset}",
                              admin, timeout=120)
            r.raise_for_status()
            page = r.json()
            mine += [w for w in page["workloads"] if (w.get("name") or "").startswith(tag + "-")]
            offset += len(page["workloads"])
            if not page["workloads"] or offset >= page["total"]:
                break
        failed = sum(1 for w in mine if w["state"] != "finished")
        subs = sorted(w["submitted_at"] for w in mine)
        starts = sorted(w["started_at"] for w in mine if w.get("started_at"))
        ends = sorted(w["ended_at"] for w in mine if w.get("ended_at"))
        first = subs[0] if subs else t0
        return {"jobs": n, "submitters": submitters, "gpu": gpu, "submit_errors": errors, "failed": failed,
                "completed": len(mine), "submit_s": t1 - t0, "submit_rate": n / (t1 - t0),
                "first_start_s": (starts[0] - first) if starts else None,
                "start_rate": len(starts) / (starts[-1] - first) if len(starts) > 1 else 0.0,
                "all_done_s": (ends[-1] - first) if ends else done_at - t0,
                "cpu_s": {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1},
                "scheduler_cpu_s": cpu1["service"] - cpu0.get("service", 0.0),
                "agents_cpu_s": cpu1["launcher"] - cpu0.get("launcher", 0.0)}

    def stop(self) -> None:
        if self.launcher and self.launcher.poll() is None:
            os.killpg(self.launcher.pid, signal.SIGTERM)
            try:
                self.launcher.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.launcher.pid, signal.SIGKILL)
                self.launcher.wait(5)
        self.hub.stop()

    def __enter__(self) -> "ComputeHubSide":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
