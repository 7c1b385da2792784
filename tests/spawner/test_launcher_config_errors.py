"""A mistaken setting of the launcher (``python -m spawner.launcher_app``: LauncherApp,
LocalLauncher, KubeLauncher), the inventory (``computehub-inventory``) or the notebook watch
(``python -m spawner.notebook_watch``) stops it at start with one line on stderr naming the
setting, exit status 2, before it calls the service: the real commands run as subprocesses,
and the service URL they are given points at nothing (a look there would only log retries)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from at_once import at_once

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "http://127.0.0.1:9/services/computehub"      # nothing listens: the check must come first


def run(tmp_path: Path, module: str, config: str | None, *args: str, **env_extra) -> subprocess.CompletedProcess:
    cfg = ["--config="]
    if config is not None:
        (tmp_path / "c.py").write_text(config + "\n")
        cfg = [f"--config={tmp_path / 'c.py'}"]
    if module == "spawner.notebook_watch" or any(a.startswith("--config=") for a in args):
        cfg = []                                    # it has no config file; or the test names one
    env = dict(os.environ, PYTHONPATH=str(ROOT), COMPUTEHUB_URL=NOWHERE, JUPYTERHUB_API_TOKEN="t" * 32,
               JUPYTERHUB_API_URL="http://127.0.0.1:9/hub/api", COMPUTEHUB_DATA_DIR=str(tmp_path / "data"))
    env.pop("POD_NAMESPACE", None)
    env.update(env_extra)
    try:
        return subprocess.run([sys.executable, "-m", module, *cfg, *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:      # it started (and retried the service) instead of refusing
        raise AssertionError(f"{module} did not refuse its settings: {e.stderr!r}") from None


def refused(r: subprocess.CompletedProcess, prefix: str, *says: str) -> None:
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "\n" not in err and "Traceback" not in err and err.startswith(f"{prefix}: error: "), err
    for s in says:
        assert s in err, err


KUBE = 'c.LauncherApp.backend_class = "spawner.launch_kube.KubeLauncher"\n'
LAUNCHER = [
    ('c.LocalLauncher.allowed_roots = ["data/{username}"]', ["LocalLauncher.allowed_roots", "not an absolute path"]),
    ('c.LocalLauncher.allowed_roots = ["/data/{user}"]', ["allowed_roots", "{user}", "only {username}"]),
    ('c.LocalLauncher.home_template = "/srv/homes"', ["LocalLauncher.home_template", "lacks {username}",
                                                      "share one home"]),
    ('c.LocalLauncher.home_template = "homes/{username}"', ["home_template must be an absolute path"]),
    ('c.LocalLauncher.run_dir_template = "{home}/{job}"', ["LocalLauncher.run_dir_template", "{job}",
                                                           "{home}, {id}, {username}"]),
    ('c.LocalLauncher.run_dir_template = "{home}/.computehub/jobs"', ["run_dir_template", "lacks {id}"]),
    ('c.LocalLauncher.checkpoint_dir_template = "{home}/{id"', ["checkpoint_dir_template", "not a valid template"]),
    ("c.LocalLauncher.min_uid = -1", ["LocalLauncher.min_uid must be at least 0"]),
    ("c.LocalLauncher.homedir = '/x'", ["LocalLauncher.homedir is not a setting"]),
    ("c.LauncherApp.poll_interval = 0", ["LauncherApp.poll_interval must be greater than 0 (seconds)"]),
    ("c.LauncherApp.preempt_grace = -5", ["LauncherApp.preempt_grace must be at least 0 (seconds)"]),
    ("c.LauncherApp.max_restarts = -1", ["LauncherApp.max_restarts must be at least 0"]),
    ("c.LauncherApp.enforce_time_limit = -1", ["LauncherApp.enforce_time_limit", "0: off"]),
    ('c.LauncherApp.kinds = ["training", "notebok"]', ["LauncherApp.kinds", "'notebok'"]),
    ('c.LauncherApp.backend_class = "spawner.nope.Backend"', ["LauncherApp.backend_class", "could not be imported"]),
    (KUBE + 'c.KubeLauncher.namespace = ""', ["KubeLauncher.namespace must be a Kubernetes namespace name"]),
    (KUBE + 'c.KubeLauncher.kubeconfig = "/nonexistent/kubeconfig"', ["KubeLauncher.kubeconfig: no such file"]),
    (KUBE + 'c.KubeLauncher.priority_class_template = "ch-{class}"', ["priority_class_template", "{priority}"]),
    (KUBE + "c.KubeLauncher.master_port = 0", ["KubeLauncher.master_port must be from 1 to 65535"]),
    (KUBE + 'c.KubeLauncher.gpu_resource = ""', ["KubeLauncher.gpu_resource"]),
    ("x = (", ["config file", "c.py line 1"]),
]


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every case of LAUNCHER run as its own launcher, side by side: {config: how it ended}."""
    folders = {c: tmp_path_factory.mktemp("case") for c, _ in LAUNCHER}    # here: mktemp is not thread-safe
    return at_once(lambda config: run(folders[config], "spawner.launcher_app", config), list(folders))


@pytest.mark.parametrize("config,says", LAUNCHER, ids=[c[0][-60:] for c in LAUNCHER])
def test_a_bad_launcher_setting_stops_it_with_one_line(launched, config, says):
    refused(launched[config], "computehub-launcher", *says)


def test_launcher_settings_from_the_environment_are_checked(tmp_path):
    refused(run(tmp_path, "spawner.launcher_app", KUBE, POD_NAMESPACE="Team_A"),
            "computehub-launcher", "KubeLauncher.namespace", "'Team_A'")
    refused(run(tmp_path, "spawner.launcher_app", None, COMPUTEHUB_URL="computehub:10101"),
            "computehub-launcher", "LauncherApp.computehub_url", "$COMPUTEHUB_URL", "'computehub:10101'")
    refused(run(tmp_path, "spawner.launcher_app", None, COMPUTEHUB_URL=""),
            "computehub-launcher", "set --url")


def test_a_launcher_config_file_named_on_purpose_must_exist(tmp_path):
    refused(run(tmp_path, "spawner.launcher_app", None, f"--config={tmp_path / 'nope.json'}"),
            "computehub-launcher", "nope.json' does not exist")


@pytest.mark.parametrize("args,says", [
    (["--interval=0"], ["InventoryApp.interval must be greater than 0 (seconds)"]),
    (["--interval=-1"], ["InventoryApp.interval", "-1"]),
    (["--default-model=A100"], ["InventoryApp.default_model", "lower case", "'A100'"]),
    (["--kubeconfig=/nonexistent/kubeconfig"], ["InventoryApp.kubeconfig: no such file"]),
    (["--InventoryApp.intervall=3"], ["InventoryApp.intervall is not a setting", "InventoryApp.interval?"]),
    (["--bogus=1"], ["unknown option --bogus"]),
])
def test_a_bad_inventory_setting_stops_it_with_one_line(tmp_path, args, says):
    refused(run(tmp_path, "spawner.inventory_app", None, *args), "computehub-inventory", *says)


@pytest.mark.parametrize("args,says", [
    (["--NotebookWatch.interval=-1"], ["NotebookWatch.interval must be greater than 0 (seconds)"]),
    (["--NotebookWatch.orphan_grace=-5"], ["NotebookWatch.orphan_grace must be at least 0"]),
    (["--NotebookWatch.gpu_busy_percent=150"], ["NotebookWatch.gpu_busy_percent must be from 0 to 100"]),
    (["--NotebookWatch.hub_api_url=hub:8081"], ["NotebookWatch.hub_api_url", "'hub:8081'"]),
    (["--NotebookWatch.intervall=3"], ["NotebookWatch.intervall is not a setting"]),
])
def test_a_bad_notebook_watch_setting_stops_it_with_one_line(tmp_path, args, says):
    refused(run(tmp_path, "spawner.notebook_watch", None, *args), "computehub-notebook-watch", *says)


def test_the_notebook_watch_without_a_service_url_says_so(tmp_path):
    refused(run(tmp_path, "spawner.notebook_watch", None, COMPUTEHUB_URL=""), "computehub-notebook-watch",
            "set $COMPUTEHUB_URL")
