"""A real JupyterHub with the real configurable-http-proxy and ComputeHub as a managed service.

Nothing is emulated here: the hub authenticates (DummyAuthenticator, password
"pw"), the proxy routes, the service checks tokens and scopes with the hub.
Users: alice, bob (group vision), carol (group nlp), lin (vision's team lead),
ada (ComputeHub admin). Services: "nobody" (a token with no scopes),
"launcher" (submit-on-behalf). Tokens are made through the hub's REST API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))     # benchmarks import this file too
from pg import free_port  # noqa: E402,F401 (tests import it from here)

CHP = ROOT / ".venv" / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
USERS = {"alice": ["vision"], "bob": ["vision"], "carol": ["nlp"], "lin": ["vision"], "ada": []}




SERVICE_CONFIG = """
c.ComputeHubService.cycle_interval = 0.5
c.ComputeHubService.cycle_delay = 0.01
c.ComputeHubService.allowed_node_selectors = ["zone"]
c.ComputeHubService.nodes = [
    {"name": "gpu-a", "gpus": 4, "gpu_model": "a100", "cpu": 32, "memory": "256Gi", "labels": {"zone": "east"}},
    {"name": "gpu-b", "gpus": 4, "gpu_model": "a100", "cpu": 32, "memory": "256Gi", "labels": {"zone": "west"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 4}, "groups": ["vision"], "user_limit": {"gpu": 8}},
    {"name": "nlp", "parent": "org", "guaranteed": {"gpu": 4}, "groups": ["nlp"], "approval_above": {"gpu": 6}},
]
"""


class RealHub:
    def __init__(self, workdir: Path, db_url: str | None = None, extra_service_config: str = "",
                 spawner_config: str = "", configure_kwargs: str = ""):
        if not CHP.exists():
            raise RuntimeError(f"configurable-http-proxy is missing at {CHP}: run 'make test' (it installs it)")
        self.dir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.service_url = self.url + "/services/computehub"
        self.api = self.service_url + "/api/v1"
        self.admin_token = os.urandom(16).hex()
        self.nobody_token = os.urandom(16).hex()
        self.launcher_token = os.urandom(16).hex()
        self.data_dir = workdir / "computehub-data"
        self.db_url = db_url
        self.extra = extra_service_config
        self.spawner_config = spawner_config   # appended to jupyterhub_config.py (e.g. a spawner_class)
        self.configure_kwargs = configure_kwargs  # more arguments to configure_jupyterhub, e.g. "notebook_watch=True"
        # Fixed for the hub's life, so a restarted hub is reached where its servers expect it.
        self.hub_port, self.proxy_api_port, self.service_port = free_port(), free_port(), free_port()
        self.proc = None
        self.tokens: dict[str, str] = {}

    def write_config(self) -> Path:
        (self.dir / "computehub_config.py").write_text(SERVICE_CONFIG + self.extra)
        groups = {}
        for u, gs in USERS.items():
            for g in gs:
                groups.setdefault(g, []).append(u)
        cfg = self.basics(groups) + textwrap.dedent(f"""
            from hub_ext.hubconfig import configure_jupyterhub
            c.JupyterHub.services = [
                {{"name": "test-admin", "api_token": "{self.admin_token}"}},
                {{"name": "nobody", "api_token": "{self.nobody_token}"}},
                {{"name": "launcher", "api_token": "{self.launcher_token}"}},
            ]
            c.JupyterHub.load_roles = [
                {{"name": "test-admin", "scopes": ["admin:users", "admin:groups", "tokens"],
                  "services": ["test-admin"]}},
            ]
            configure_jupyterhub(c, port={self.service_port}, data_dir="{self.data_dir}",
                                 config_file="{self.dir / 'computehub_config.py'}",
                                 db_url={self.db_url!r}, admins=["ada"], team_leads={{"vision": ["lin"]}},
                                 on_behalf_services=["launcher"], {self.configure_kwargs})
            """)
        path = self.dir / "jupyterhub_config.py"
        path.write_text(cfg + self.spawner_config)
        return path

    def basics(self, groups: dict[str, list[str]]) -> str:
        """The hub itself: where it listens, its proxy, database, users and groups."""
        return textwrap.dedent(f"""
            c.JupyterHub.bind_url = "{self.url}"
            c.JupyterHub.hub_bind_url = "http://127.0.0.1:{self.hub_port}"
            c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_api_port}"
            c.ConfigurableHTTPProxy.command = ["{CHP}"]
            c.JupyterHub.db_url = "sqlite:///{self.dir / 'hub.sqlite'}"
            c.JupyterHub.cookie_secret_file = "{self.dir / 'cookie_secret'}"
            c.JupyterHub.pid_file = "{self.dir / 'hub.pid'}"
            c.JupyterHub.authenticator_class = "dummy"
            c.DummyAuthenticator.password = "pw"
            c.Authenticator.allowed_users = {set(USERS)!r}
            c.JupyterHub.load_groups = {json.dumps({g: {"users": us} for g, us in groups.items()})}
            """)

    def start(self, timeout: float = 60.0) -> "RealHub":
        cfg = self.write_config()
        env = dict(os.environ)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        self.log = open(self.dir / "hub.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(cfg)], cwd=self.dir,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited: {self.tail()}")
            try:
                r = requests.get(self.api + "/openapi.json",
                                 headers={"Authorization": f"token {self.admin_token}"}, timeout=2)
                if r.status_code in (200, 401, 403):
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"hub or service did not come up: {self.tail()}")
        for user in USERS:
            self.tokens[user] = self.make_token(user)
        return self

    def __enter__(self) -> "RealHub":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def make_token(self, user: str, scopes=None) -> str:
        body = {"note": "test"} if scopes is None else {"note": "test", "scopes": scopes}
        r = requests.post(f"{self.url}/hub/api/users/{user}/tokens", json=body,
                          headers={"Authorization": f"token {self.admin_token}"}, timeout=10)
        r.raise_for_status()
        return r.json()["token"]

    def call(self, method: str, path: str, token: str | None = None, **kw) -> requests.Response:
        headers = kw.pop("headers", {})
        if token:
            headers["Authorization"] = f"token {token}"
        return requests.request(method, self.api + path, headers=headers, timeout=kw.pop("timeout", 10), **kw)

    def service_pid(self) -> int | None:
        out = subprocess.run(["pgrep", "-f", f"hub_ext serve.*{self.data_dir}"], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        return pids[0] if pids else None

    def tail(self, n: int = 4000) -> str:
        try:
            return (self.dir / "hub.log").read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        pid = self.service_pid()
        if pid:
            os.kill(pid, signal.SIGKILL)
        # A hub killed hard leaves its proxy running by design; never leave one behind.
        pidfile = self.dir / "jupyterhub-proxy.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError, PermissionError):
                pass
        if getattr(self, "log", None):
            self.log.close()
