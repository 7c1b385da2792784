"""A mistaken setting of ``computehub serve`` (config file or command line) stops it at start
with one line on stderr naming the setting, and exit status 2, before it writes anything or
talks to the hub: the real command runs as a subprocess with no hub anywhere (the hub's URL
points at nothing; the check must come first). In-process: queues listed child first are
created, and allowed node selectors may be key=value."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from at_once import at_once

from hub_ext.app import ComputeHubService
from hub_ext.base import APIError
from hub_ext.scopes import SUBMIT, Caller

ROOT = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, config: str | None, *args: str, suffix: str = ".py",
          data_dir: str = "") -> subprocess.CompletedProcess:
    cfg = []
    if config is not None:
        (tmp_path / f"c{suffix}").write_text(config)
        cfg = [f"--config={tmp_path / f'c{suffix}'}"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), JUPYTERHUB_API_TOKEN="t" * 32,
               JUPYTERHUB_API_URL="http://127.0.0.1:9/hub/api")       # nothing answers there
    for k in ("JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_SERVICE_PREFIX", "COMPUTEHUB_DATA_DIR"):
        env.pop(k, None)
    return subprocess.run([sys.executable, "-m", "hub_ext", "serve", f"--data-dir={data_dir or tmp_path / 'data'}",
                           *cfg, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def refused(run: subprocess.CompletedProcess, *says: str, status: int = 2) -> str:
    err = run.stderr.strip()
    assert run.returncode == status, (run.returncode, run.stderr)
    assert "\n" not in err and "Traceback" not in err and err.startswith("computehub: error: "), err
    for s in says:
        assert s in err, err
    return err


C = "c.ComputeHubService."
CASES = [
    (C + 'nodes = [{"name": "n1", "gpus": "eight"}]', ["ComputeHubService.nodes[0] ('n1')", "gpus", "'eight'"]),
    (C + 'nodes = [{"name": "n1", "gpus": 8}, {"name": "n1", "gpus": 4}]', ["nodes[1]", "'n1' is listed twice"]),
    (C + 'nodes = ["n1"]', ["each entry of ComputeHubService.nodes must be a mapping", "'n1'"]),
    (C + 'initial_queues = [{"name": "a", "parent": "nope"}]', ["initial_queues", "unknown parent 'nope'"]),
    (C + 'initial_queues = [{"name": "a", "guarantee": {"gpu": 2}}]', ["initial_queues[0] ('a')", "guarantee"]),
    (C + 'initial_queues = [{"name": "a", "guaranteed": {"gpu": -3}}]', ["initial_queues[0]", "negative"]),
    (C + 'prices = {"a100": -3}', ["ComputeHubService.prices['a100']", "at least 0", "-3"]),
    (C + 'prices = {"a100": "cheap"}', ["ComputeHubService.prices['a100']", "'cheap'"]),
    (C + 'prices = {"A100": 3.0}', ["'A100' is no GPU model", "lower case"]),
    (C + 'allowed_node_selectors = "zone,rack"', ["allowed_node_selectors", "'zone,rack'", "key=value"]),
    (C + "cycle_interval = 0", ["ComputeHubService.cycle_interval must be greater than 0 (seconds)"]),
    (C + "cycle_interval = -5", ["cycle_interval", "-5"]),
    (C + "cycle_delay = -1", ["ComputeHubService.cycle_delay must be at least 0"]),
    (C + "estimate_reuse = -2", ["ComputeHubService.estimate_reuse must be at least 0"]),
    (C + "stop_deadline = -60", ["ComputeHubService.stop_deadline must be at least 0 (seconds)"]),
    (C + 'start_deadline = "1h"', ["ComputeHubService.start_deadline", "'1h'"]),
    (C + 'db_url = "not a url"', ["ComputeHubService.db_url", "is not a database URL", "postgresql+psycopg"]),
    (C + 'db_url = "sqlite://"', ["in-memory database", "lost"]),
    (C + 'db_url = "postgres://u@db/x"', ["ComputeHubService.db_url", "postgresql+psycopg"]),
    (C + 'url = "127.0.0.1:10101"', ["ComputeHubService.url", "http://", "'127.0.0.1:10101'"]),
    (C + 'service_prefix = "services/computehub/"', ["service_prefix", "starting with '/'"]),
    (C + "cycle_intervall = 3", ["ComputeHubService.cycle_intervall is not a setting",
                                 "did you mean ComputeHubService.cycle_interval?"]),
    ("c.ComputehubService.cycle_interval = 3", ["'ComputehubService'", "did you mean ComputeHubService?"]),
    ('c.EngineConfig.order = "lifo"', ["EngineConfig.order", "'lifo'"]),
    ("c.EngineConfig.assumed_limit = 0", ["EngineConfig.assumed_limit must be a positive number of seconds"]),
    ("c.EngineConfig.half_life = -1", ["EngineConfig.half_life", "-1"]),
    ("c.EngineConfig.max_victims_tried = 0", ["EngineConfig.max_victims_tried must be at least 1"]),
    ("c.EngineConfig.consolidation_moves = -1", ["EngineConfig.consolidation_moves must be at least 0"]),
    ("c.EngineConfig.preempt_for_shorter = 0.5", ["EngineConfig.preempt_for_shorter", "greater than 1"]),
    (C + "cycle_interval = (", ["config file", "c.py line 1"]),
    (C + "cycle_interval = five", ["config file", "c.py line 1", "NameError", "five"]),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Every case of CASES run as its own ``computehub serve``, as many at once as there are
    cores (each run is mostly the interpreter starting and importing): {config: (its folder,
    how it ended)}."""
    folders = {c: tmp_path_factory.mktemp("case") for c, _ in CASES}       # here: mktemp is not thread-safe
    return at_once(lambda config: (folders[config], serve(folders[config], config + "\n")), list(folders))


@pytest.mark.parametrize("config,says", CASES, ids=[c[0][:60] for c in CASES])
def test_a_bad_setting_stops_serve_with_one_line(served, config, says):
    folder, run = served[config]
    refused(run, *says)
    assert not (folder / "data").exists()         # refused before anything was written


@pytest.mark.parametrize("args,says", [
    (["--ComputeHubService.cycle_interval=abc"], ["ComputeHubService.cycle_interval expects a number", "'abc'"]),
    (["--ComputeHubService.cycle_interval=0"], ["cycle_interval must be greater than 0"]),
    (["--url=notaurl"], ["ComputeHubService.url", "'notaurl'"]),
    (["--db-url=notaurl"], ["is not a database URL"]),
    (["--cycle-interval=3"], ["--cycle-interval"]),
    (["--bogus", "3"], ["unknown option --bogus"]),
    (["stray"], ["unexpected argument 'stray'"]),
])
def test_a_bad_command_line_option_stops_serve_with_one_line(tmp_path, args, says):
    refused(serve(tmp_path, None, "--config=", *args), *says)


def test_a_config_file_named_on_purpose_must_exist_and_be_py_or_json(tmp_path):
    refused(serve(tmp_path, None, f"--config={tmp_path / 'missing.py'}"), "missing.py' does not exist")
    refused(serve(tmp_path, "", suffix=".yaml"), "must be a Python (.py) or JSON (.json) file")
    refused(serve(tmp_path, '{"ComputeHubService": {"cycle_interval": 0', suffix=".json"), "c.json", "JSONDecodeError")
    refused(serve(tmp_path, '{"cycle_interval": 3}', suffix=".json"),
            "'cycle_interval' names no class", '{"ComputeHubService": {"cycle_interval": ...}}')


def test_settings_from_the_environment_are_checked_too(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JUPYTERHUB_SERVICE_URL="127.0.0.1:10101")
    run = subprocess.run([sys.executable, "-m", "hub_ext", "serve", "--config=", f"--data-dir={tmp_path / 'd'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    refused(run, "ComputeHubService.url", "$JUPYTERHUB_SERVICE_URL", "'127.0.0.1:10101'")


def test_a_database_that_cannot_be_opened_is_one_line_and_exit_1(tmp_path):
    """Exit 1, not 2: the database may only be down for now (whoever restarts the service retries)."""
    err = refused(serve(tmp_path, None, "--config=", f"--db-url=sqlite:///{tmp_path}/no/such/dir/x.sqlite"),
                  "cannot open the database", "ComputeHubService.db_url", "unable to open database file",
                  status=1)
    assert "password" not in err


def test_an_audit_log_that_cannot_be_written_is_one_line(tmp_path):
    refused(serve(tmp_path, C + 'audit_log_file = "/nonexistent-dir/audit.log"\n'),
            "ComputeHubService.audit_log_file: cannot write /nonexistent-dir/audit.log", "No such file")


def test_a_data_dir_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    refused(serve(tmp_path, None, "--config=", data_dir=str(tmp_path / "afile" / "sub")),
            "ComputeHubService.data_dir: cannot create", "Not a directory")


def test_initial_queues_may_name_a_child_before_its_parent(tmp_path):
    """Checked as a whole and created parents first: before, the child failed at start and
    the queues created until then stayed, so the next start skipped the rest for good."""
    svc = ComputeHubService(data_dir=str(tmp_path), config_file="", initial_queues=[
        {"name": "vision", "parent": "org", "guaranteed": {"gpu": 8}}, {"name": "org", "guaranteed": {"gpu": 16}}])
    svc.initialize([])
    assert sorted(svc.sched.state.tree.specs) == ["org", "vision"]
    svc.sched.store.close()


def test_an_allowed_selector_is_a_key_or_key_equals_value(tmp_path):
    """The chart documents allowedNodeSelectors as key=value ('zone=east'); a key allows any value."""
    svc = ComputeHubService(data_dir=str(tmp_path), config_file="", initial_queues=[{"name": "a"}],
                            allowed_node_selectors=["zone=east", "rack"])
    svc.initialize([])
    alice = Caller({"name": "alice", "scopes": [SUBMIT]})

    def submit(selector):
        return asyncio.run(svc.submission_for(alice, {"queue": "a", "node_selector": selector}))

    assert submit({"zone": "east", "rack": "r7"})["node_selector"] == {"zone": "east", "rack": "r7"}
    with pytest.raises(APIError) as e:
        submit({"zone": "west"})
    assert e.value.status_code == 403 and "zone=west" in e.value.log_message
    svc.sched.store.close()
