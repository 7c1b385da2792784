"""``computehub demo``: the whole platform on 127.0.0.1, the embedded default.

A real JupyterHub with the real configurable-http-proxy, ComputeHub as a
managed service on SQLite under a data folder, demo users in two teams with
quotas, and this machine's GPUs from NVML — or, with no GPU, a simulated node
labelled as such. ``computehub demo --replay`` instead replays a real cluster
trace through the scheduler (no hub needed).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from traitlets import Bool, Integer, Unicode

from .cli import Command, UsageError

CHP_VERSION = "5.3.0"
TEAMS = {"vision": ["alice", "bob"], "nlp": ["carol", "dave"]}
ADMIN = "admin"
PASSWORD = "computehub-demo"     # every demo user's (SharedPasswordAuthenticator: 8 characters at least)
ADMIN_PASSWORD_FILE = "admin_password"   # in the data folder: the admin's own, random (32+ characters)


def secret_file(path: Path) -> str:
    """A random secret kept in ``path`` (only this user may read it), made on first use."""
    if not path.exists():
        path.write_text(secrets.token_hex(24))
        path.chmod(0o600)
    return path.read_text().strip()


def chp_path() -> Path:
    return Path(sys.prefix) / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"


def ensure_proxy() -> Path:
    """The real configurable-http-proxy, installed from npm next to the virtualenv if missing."""
    path = chp_path()
    if not path.exists():
        npm = shutil.which("npm")
        if not npm:
            raise UsageError("the demo needs Node.js and npm for configurable-http-proxy; install them first")
        print(f"installing configurable-http-proxy {CHP_VERSION} (npm) ...", flush=True)
        subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(path.parents[2]),
                        f"configurable-http-proxy@{CHP_VERSION}"], check=True)
    return path


class DemoApp(Command):
    name = "computehub demo"
    description = ("Run the whole platform on 127.0.0.1: JupyterHub, its proxy and ComputeHub with demo "
                   "users and quotas (--replay: replay a real GPU cluster trace instead).")
    port = Integer(8000, help="Port of the hub on 127.0.0.1.").tag(config=True)
    data_dir = Unicode("computehub-demo", help="Folder for the demo's databases, config and logs "
                                               "(created if missing; kept between runs).").tag(config=True)
    replay = Bool(False, help="Replay the shipped trace sample instead of starting the platform.").tag(config=True)
    aliases = {"port": "DemoApp.port", "data-dir": "DemoApp.data_dir"}
    flags = {"replay": ({"DemoApp": {"replay": True}}, "Replay a real cluster trace (no hub).")}

    def start(self):
        self.refuse_extra_args()
        if self.replay:
            from .cli_simulate import ReplayDemoApp

            app = ReplayDemoApp(parent=self)
            return app.start()
        if not 0 < self.port < 65536:
            raise UsageError(f"--port must be a TCP port, not {self.port}")
        chp = ensure_proxy()
        data = Path(self.data_dir).resolve()
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.write_config(data, chp)
        self.print_welcome()
        env = dict(os.environ)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        hub = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(cfg)], cwd=data, env=env)

        def forward(signum, _frame):
            hub.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        return hub.wait()

    def write_config(self, data: Path, chp: Path) -> Path:
        members = {u: g for g, us in TEAMS.items() for u in us}
        (data / "computehub_config.py").write_text(textwrap.dedent("""
            # ComputeHub service config for the demo (edit freely; kept between runs).
            from spawner.inventory import local_nodes

            c.ComputeHubService.nodes = local_nodes()   # NVML GPUs, or one simulated node
            gpus = sum(n["gpus"] for n in c.ComputeHubService.nodes)
            c.ComputeHubService.initial_queues = [
                {"name": "org"},
                {"name": "vision", "parent": "org", "guaranteed": {"gpu": gpus // 2}, "groups": ["vision"],
                  "user_limit": {"gpu": max(1, gpus // 2)}, "idle": {"warn_after": 1800, "release_after": 3600}},
                {"name": "nlp", "parent": "org", "guaranteed": {"gpu": gpus - gpus // 2}, "groups": ["nlp"],
                  "approval_above": {"gpu": max(1, gpus // 2)}},
            ]
            c.ComputeHubService.prices = {"any": 2.0, "sim": 0.0}
            """) + textwrap.dedent(f"""
            # Mail that jobs ask for (--mail end) lands in this Maildir: a file per mail in mail/new/.
            c.ComputeHubService.mail_maildir = {str(data / "mail")!r}
            c.ComputeHubService.mail_address = "{{user}}@demo.invalid"
            c.ComputeHubService.mail_user_domains = ["demo.invalid"]    # computehub mail-address me@lab.demo.invalid
            """) + self.launcher_config(data))
        groups = {g: {"users": us} for g, us in TEAMS.items()}
        spawner_token = secret_file(data / "spawner_token")
        admin_password = secret_file(data / ADMIN_PASSWORD_FILE)
        cfg = data / "jupyterhub_config.py"
        cfg.write_text(textwrap.dedent(f"""
            # JupyterHub config for `computehub demo` (rewritten at every start).
            from hub_ext.hubconfig import configure_jupyterhub

            c.JupyterHub.bind_url = "http://127.0.0.1:{self.port}"
            c.JupyterHub.hub_bind_url = "http://127.0.0.1:{self.port + 1}"
            c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.port + 2}"
            c.ConfigurableHTTPProxy.command = [{str(chp)!r}]
            c.JupyterHub.db_url = "sqlite:///jupyterhub.sqlite"
            c.JupyterHub.default_url = "/services/computehub/"   # land on ComputeHub after login
            c.JupyterHub.cookie_secret_file = "jupyterhub_cookie_secret"
            c.JupyterHub.authenticator_class = "shared-password"
            c.SharedPasswordAuthenticator.user_password = {PASSWORD!r}
            c.SharedPasswordAuthenticator.admin_password = {admin_password!r}
            c.Authenticator.allowed_users = {sorted(set(members) | {ADMIN})!r}
            c.Authenticator.admin_users = {{{ADMIN!r}}}
            c.JupyterHub.load_groups = {groups!r}
            # Notebook spawns go through the ComputeHub queue (1 GPU each); the demo users are
            # not OS users, so servers run as this user with homes under the data folder.
            c.JupyterHub.services = [{{"name": "computehub-spawner", "api_token": {spawner_token!r}}}]
            c.JupyterHub.spawner_class = "spawner.local.QueuedSimpleLocalProcessSpawner"
            c.QueueingMixin.computehub_token = {spawner_token!r}
            c.QueueingMixin.gpus = 1
            c.Spawner.args = {["--allow-root"] if os.getuid() == 0 else []!r}
            c.SimpleLocalProcessSpawner.home_dir_template = {str(data / "homes") + "/{username}"!r}
            configure_jupyterhub(c, port={self.port + 3}, data_dir={str(data / "service")!r},
                                 config_file={str(data / "computehub_config.py")!r},
                                 admins=[{ADMIN!r}], team_leads={{"vision": ["bob"]}},
                                 on_behalf_services=["computehub-spawner"], launcher=True, notebook_watch={{"interval": 15}})
            """))
        return cfg

    @staticmethod
    def launcher_config(data: Path) -> str:
        """%submit / %serve jobs run as local processes (docs/launchers.md). The demo users have no
        OS accounts, so jobs run as this user (demo mode), in the users' homes under the data folder."""
        homes = str(data / "homes") + "/{username}"
        return (f"c.LocalLauncher.home_template = {homes!r}   # jobs run as this OS user (demo mode)\n"
                f"c.LocalLauncher.allowed_roots = [{homes!r}]\n"
                "c.LocalLauncher.allow_launcher_user = True   # even as root: a demo isolates no one\n")

    def print_welcome(self):
        base = f"http://127.0.0.1:{self.port}"
        print(textwrap.dedent(f"""
            ComputeHub demo
            ---------------
            Log in at {base}/hub/login   (the users' password: {PASSWORD};
              admin's: in {Path(self.data_dir) / ADMIN_PASSWORD_FILE})
              users: alice, bob (team vision; bob is its lead), carol, dave (team nlp), admin (ComputeHub admin)
            Then try:
              - Start My Server: a 1-GPU notebook; with the GPUs taken, the spawn page shows the queue
                position, ETA and reason, and it starts by itself when a GPU frees up
              - {base}/services/computehub/          your work, positions and reasons
              - in a notebook: %submit --gpus 1 train.py   (a training job; %jobs, %logs ID, %cancel ID)
                               %submit --mail end train.py   (its mail lands in {Path(self.data_dir) / "mail" / "new"})
                               %serve python -m http.server $PORT   (a service behind the hub's login)
              - {base}/services/computehub/admin/    (as admin) queues, quotas, nodes, approvals, audit
              - a token from {base}/hub/token, then (the POST runs nothing: it holds a GPU until you
                cancel it, curl -X DELETE ... /api/v1/workloads/ID with the same token, or an hour):
                curl -H "Authorization: token $TOKEN" -H "Content-Type: application/json" -X POST {base}/services/computehub/api/v1/workloads \\
                     -d '{{"kind": "training", "resources": {{"gpu": 1}}, "time_limit": 600}}'
                curl -H "Authorization: token $TOKEN" {base}/services/computehub/api/v1/workloads
                curl -N -H "Authorization: token $TOKEN" {base}/services/computehub/api/v1/events
            Stop with Ctrl-C.
            """), flush=True)
