"""The ComputeHub status bar item and side panel in a real JupyterLab, in a real browser.

A real JupyterHub + configurable-http-proxy + the ComputeHub service, the real
QueuedSimpleLocalProcessSpawner starting alice's real JupyterLab (default_url
/lab) with this repository's server and lab extensions, and Chromium (the
Debian package, driven by Playwright) logged in through the hub's login form.

Emulated: the GPUs. The service's cluster is a declared simulated node "local"
with 2 GPUs, and inside alice's server NVML is replaced at its boundary: a
jupyter_server config file (on JUPYTER_CONFIG_PATH) monkeypatches the ``pynvml``
functions to read two A100s from a JSON file the test writes. The test also
plays the job launcher: once alice's job is admitted it reports "running"
through the REST API, as a launcher does (launchers are not this extension's).

alice's notebook holds GPU 0 (CUDA_VISIBLE_DEVICES=0: the status bar shows that
one GPU); while the tab is hidden, Lab does not poll, and polls at once when it
shows again. bob's job takes GPU 1. alice submits a training job through the API: the
status bar shows "Queued #1 · …" and the panel the scheduler's reason. bob's
job is cancelled (the GPUs free up), alice's job is admitted and reported
running: both views show it running within seconds, with no reload, and the panel says
when its launcher reported a saved checkpoint. Then the
service is frozen (SIGSTOP): the panel says it is unreachable and keeps the
last known state; thawed, it recovers. Last, a batch job of alice's is preempted
by bob's training job and the panel says it was preempted once. Screenshots go to tmp_path and
test-artifacts/lab/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from playwright import sync_api

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spawner"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_ext"))
from localhub import hub_api, kill_servers, server_procs, spawner_config, wait_for, wait_ready  # noqa: E402
from realhub import RealHub  # noqa: E402
from test_mail import Inbox, free_port, mail_config  # noqa: E402

from aiosmtpd.controller import Controller  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "lab"
SERVICE = """
c.ComputeHubService.nodes = [
    {"name": "local", "gpus": 2, "gpu_model": "a100", "cpu": 16, "memory": "64Gi",
     "labels": {"computehub/simulated": "true"}},
]
c.ComputeHubService.initial_queues = [
    {"name": "org"},
    {"name": "vision", "parent": "org", "guaranteed": {"gpu": 2}, "limit": {"gpu": 2}, "groups": ["vision"]},
    {"name": "nlp", "parent": "org", "groups": ["nlp"]},
    {"name": "vision-batch", "parent": "org", "groups": ["vision"]},
]
"""


GiB = 2**30
# Runs inside alice's single-user server: NVML's functions answer from the test's JSON file.
FAKE_NVML = """
import json, os
from types import SimpleNamespace
import pynvml

def _gpus():
    with open(os.environ["FAKE_NVML_FILE"]) as f:
        return json.load(f)

def _get(key):
    return lambda h, *a: _gpus()[h][key]

pynvml.nvmlInit = lambda: None
pynvml.nvmlShutdown = lambda: None
pynvml.nvmlDeviceGetCount = lambda: len(_gpus())
pynvml.nvmlDeviceGetHandleByIndex = lambda i: i
pynvml.nvmlDeviceGetName = _get("name")
pynvml.nvmlDeviceGetUUID = _get("uuid")
pynvml.nvmlDeviceGetTemperature = _get("temp")
pynvml.nvmlDeviceGetPowerUsage = _get("power_mw")
pynvml.nvmlDeviceGetEnforcedPowerLimit = _get("limit_mw")
pynvml.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=_gpus()[h]["util"], memory=0)
pynvml.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=_gpus()[h]["used"], total=_gpus()[h]["total"])
pynvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [SimpleNamespace(pid=p, usedGpuMemory=m)
                                                          for p, m in _gpus()[h]["procs"]]
c.ComputeHubLab.request_timeout = 3.0
c.ComputeHubLab.gpu_sample_gap = 0.5
"""


def write_gpus(path: Path, util0: int, used0_gib: int) -> None:
    gpu = {"name": "NVIDIA A100-SXM4-80GB", "temp": 50, "power_mw": 200_000, "limit_mw": 400_000,
           "total": 80 * GiB, "procs": []}
    gpus = [dict(gpu, uuid="GPU-0000aaaa", util=util0, used=used0_gib * GiB, procs=[[4242, used0_gib * GiB]]),
            dict(gpu, uuid="GPU-1111bbbb", util=99, used=70 * GiB)]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(gpus))
    os.replace(tmp, path)   # the server never reads half a file


@pytest.fixture
def labhub(tmp_path):
    inbox = Inbox()                  # a real SMTP server for the service's mail
    port = free_port()
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    h = RealHub(tmp_path, extra_service_config=SERVICE + mail_config(port))
    h.inbox = inbox
    conf = h.lab_config = tmp_path / "lab-config"
    conf.mkdir()
    (conf / "jupyter_server_config.py").write_text(FAKE_NVML)
    h.gpus_file = tmp_path / "gpus.json"
    write_gpus(h.gpus_file, 63, 12)
    h.lab_settings = tmp_path / "lab-settings"   # JupyterLab's user settings (none: the defaults)
    env = {"JUPYTER_CONFIG_PATH": str(conf), "FAKE_NVML_FILE": str(h.gpus_file),
           "JUPYTERLAB_SETTINGS_DIR": str(h.lab_settings)}
    h.spawner_config = spawner_config(h) + f"""
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.environment = {env!r}
"""
    try:
        h.start()
        yield h
    finally:
        h.stop()
        smtp.stop()
        left = kill_servers(h)
        assert not left, f"single-user servers left behind: {left}"


def workload(hub, wid) -> dict:
    r = hub.call("GET", f"/workloads/{wid}", hub.launcher_token)
    r.raise_for_status()
    return r.json()


def open_lab(page, hub, user: str = "alice"):
    """Log ``user`` in and wait for JupyterLab with this extension: its status bar item."""
    page.goto(hub.url + "/hub/login?next=" + f"/user/{user}/lab")
    page.fill("#username_input", user)
    page.fill("#password_input", "pw")
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf".*/user/{user}/lab.*"), timeout=90_000)
    status = page.locator(".jp-ComputeHubStatus")
    status.wait_for(timeout=120_000)
    return status


def set_visibility(page, state: str) -> None:
    """What the browser does when the tab is hidden or shown (headless Chromium never hides it)."""
    page.evaluate("""state => {
        Object.defineProperty(document, 'visibilityState', {value: state, configurable: true});
        document.dispatchEvent(new Event('visibilitychange'));
    }""", state)


def shoot(page, tmp_path, name):
    shots = tmp_path / "screenshots"
    shots.mkdir(exist_ok=True)
    path = shots / name
    page.screenshot(path=str(path))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, ARTIFACTS / name)
    print(f"screenshot: {path} (copied to {ARTIFACTS / name})")


def test_status_bar_and_panel_follow_a_queued_job_to_running(labhub, browser, tmp_path):
    hub = labhub
    # alice's JupyterLab holds GPU 0.
    r = hub_api(hub, "POST", "/users/alice/server", "alice")
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice", timeout=150)
    assert server_procs(hub)["alice"][1]["CUDA_VISIBLE_DEVICES"] == "0"

    ctx = browser.new_context(viewport={"width": 1400, "height": 850})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        status = open_lab(page, hub)         # JupyterLab loaded with our extension
        # Running on GPU 0 only: CUDA_VISIBLE_DEVICES hides GPU 1 (99% busy) from this server.
        sync_api.expect(status).to_have_text("GPU 1×A100 · 63% · 12/80 GB", timeout=30_000)
        write_gpus(hub.gpus_file, 87, 20)
        sync_api.expect(status).to_have_text("GPU 1×A100 · 87% · 20/80 GB", timeout=30_000)

        # A hidden tab is quiet: no polls until it shows again, then one at once.
        polls = []
        page.on("request", lambda req: polls.append(time.monotonic()) if "/computehub/workloads" in req.url else None)
        set_visibility(page, "hidden")
        hidden_at = time.monotonic()
        page.wait_for_timeout(7_000)           # three poll intervals
        assert not [t for t in polls if t > hidden_at + 1.0], "polled while hidden"
        set_visibility(page, "visible")
        shown_at = time.monotonic()
        for _ in range(50):                    # Playwright delivers request events only while it runs
            if [t for t in polls if t > shown_at]:
                break
            page.wait_for_timeout(200)
        assert [t for t in polls if t > shown_at], "no poll after the tab showed again"

        # bob's job takes GPU 1 (it declares 10 minutes, so alice's ETA is known).
        r = hub.call("POST", "/workloads", hub.tokens["bob"],
                     json={"name": "bob-train", "kind": "training", "resources": {"gpu": 1}, "time_limit": 600})
        assert r.status_code == 201, r.text
        bob_job = r.json()["id"]
        wait_for("bob's job to be admitted", lambda: workload(hub, bob_job)["state"] == "admitted", 30)

        # alice submits a job through the API while both GPUs are busy.
        r = hub.call("POST", "/workloads", hub.tokens["alice"],
                     json={"name": "alice-train", "kind": "training", "resources": {"gpu": 1}})
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        w = wait_for("alice's job explained", lambda: (lambda x: x if x["state"] == "pending"
                     and x["explanation"]["reason"] != "waiting for the next scheduling cycle" else None)(
                         workload(hub, job)), 30)
        assert w["explanation"]["position_in_queue"] == 1, w
        # ~10 min: bob's declared 10 minutes, less the (loaded-machine) seconds since he started.
        eta = r"~(8|9|10) min"
        sync_api.expect(status).to_have_text(re.compile(rf"^Queued #1 · {eta} · GPU 1×A100 · 87% · 20/80 GB$"),
                                             timeout=30_000)

        status.click()                        # opens the panel
        row = page.locator(f".jp-ComputeHub-workload[data-workload-id='{job}']")
        sync_api.expect(row).to_be_visible(timeout=15_000)
        assert row.get_attribute("data-state") == "pending"
        sync_api.expect(row.locator(".jp-ComputeHub-reason")).to_have_text(
            "waiting in the queue: " + w["explanation"]["reason"])
        sync_api.expect(row.locator(".jp-ComputeHub-facts")).to_contain_text(
            re.compile(rf"position 1 of 1 · ETA {eta}$"))
        sync_api.expect(page.locator(".jp-ComputeHub-queue[data-queue='vision'] .jp-ComputeHub-facts")) \
            .to_have_text("2 / 2 GPUs guaranteed · limit 2")
        gpus = page.locator(".jp-ComputeHub-gpu")
        sync_api.expect(gpus).to_have_count(1)
        sync_api.expect(gpus.locator(".jp-ComputeHub-facts")).to_have_text(
            "87% util · 20/80 GB · 50 °C · 200/400 W · 1 process")
        sync_api.expect(gpus.locator(".jp-ComputeHub-sparkline")).to_be_visible()
        shoot(page, tmp_path, "lab-queued.png")

        # Held from the panel, it says who holds it and offers Release; released, it waits in line again.
        row.locator(".jp-ComputeHub-hold").click()
        sync_api.expect(row).to_have_attribute("data-state", "held", timeout=30_000)
        sync_api.expect(row.locator(".jp-ComputeHub-reason")).to_contain_text(
            "not in line yet: held by alice")
        assert workload(hub, job)["metadata"]["hold"]["by"] == "alice"
        row.locator(".jp-ComputeHub-release").click()
        sync_api.expect(row).to_have_attribute("data-state", "pending", timeout=30_000)
        sync_api.expect(row.locator(".jp-ComputeHub-hold")).to_be_visible()
        # A second job of hers waits behind it; "First" puts that one first among hers (the service's top).
        r = hub.call("POST", "/workloads", hub.tokens["alice"],
                     json={"name": "alice-two", "kind": "training", "resources": {"gpu": 1}})
        assert r.status_code == 201, r.text
        second = r.json()["id"]
        row2 = page.locator(f".jp-ComputeHub-workload[data-workload-id='{second}']")
        with page.expect_request(lambda req: req.url.split("?")[0].endswith(f"/computehub/workloads/{second}/top")):
            row2.locator(".jp-ComputeHub-first").click(timeout=30_000)
        wait_for("alice-two first among hers",
                 lambda: workload(hub, second)["explanation"].get("position_in_queue") == 1, 30)
        # Places in line are the last cycle's, and the one after the top follows it within moments.
        wait_for("alice-train second", lambda: workload(hub, job)["explanation"].get("position_in_queue") == 2, 10)
        assert hub.call("DELETE", f"/workloads/{second}", hub.tokens["alice"]).status_code == 200
        sync_api.expect(row2).to_have_attribute("data-state", "cancelled", timeout=30_000)
        sync_api.expect(row.locator(".jp-ComputeHub-first")).to_have_count(0)     # nothing else of hers waits
        # Change…: what if it asked for no GPU? Tried first (nothing changes), the form kept across
        # the panel's redraws; then a shorter time limit is applied, and the keyboard is back on the row.
        row.locator(".jp-ComputeHub-change-open").click()
        form = page.locator(".jp-ComputeHub-change")
        sync_api.expect(form.locator("h3")).to_have_text("Change alice-train")
        gpus_in, limit_in = form.locator(".jp-ComputeHub-change-gpus"), form.locator(".jp-ComputeHub-change-limit")
        sync_api.expect(gpus_in).to_be_focused()
        sync_api.expect(gpus_in).to_have_value("1")
        sync_api.expect(limit_in).to_have_value("")
        gpus_in.fill("0")
        page.wait_for_timeout(2_500)                           # a poll and a redraw in between
        sync_api.expect(gpus_in).to_have_value("0")
        form.locator(".jp-ComputeHub-change-try").click()
        said = form.locator(".jp-ComputeHub-change-status")
        sync_api.expect(said).to_have_text(re.compile(
            rf"^With the change: #1 in line, starts now \(now: #1 in line, starts {eta}\)\. Nothing changed yet\.$"))
        assert workload(hub, job)["resources"]["gpu"] == 1
        limit_in.fill("soon")
        form.locator(".jp-ComputeHub-change-try").click()
        sync_api.expect(said).to_have_text('The time limit must look like 30m, 2h or 1h30m, not "soon"')
        gpus_in.fill("1")
        limit_in.fill("45m")
        form.locator(".jp-ComputeHub-change-apply").click()
        sync_api.expect(form).to_be_hidden()
        assert (workload(hub, job)["time_limit"], workload(hub, job)["resources"]["gpu"]) == (2700, 1)
        sync_api.expect(row.locator(".jp-ComputeHub-change-open")).to_be_focused()
        # The form changes CPU, memory, queue and name too: another of my queues, a new name and
        # more memory tried (only what differs is sent), then CPU and memory applied.
        row.locator(".jp-ComputeHub-change-open").click()
        queue_in, memory_in = form.locator(".jp-ComputeHub-change-queue"), form.locator(".jp-ComputeHub-change-memory")
        sync_api.expect(limit_in).to_have_value("45m")
        sync_api.expect(queue_in).to_have_value("vision")
        assert queue_in.locator("option").all_inner_texts() == ["vision", "vision-batch"]
        sync_api.expect(form.locator(".jp-ComputeHub-change-name")).to_have_value("alice-train")
        memory_before = memory_in.input_value()
        queue_in.select_option("vision-batch")
        form.locator(".jp-ComputeHub-change-name").fill("alice-train-2")
        memory_in.fill("3Gi")
        with page.expect_request(lambda req: req.method == "PATCH" and "dry_run=true" in req.url) as sent:
            form.locator(".jp-ComputeHub-change-try").click()
        assert sent.value.post_data_json == {"queue": "vision-batch", "name": "alice-train-2", "resources": {"memory": "3Gi"}}
        tried = re.compile(r"^With the change: #1 in line, .*\. Nothing changed yet\.$")
        sync_api.expect(said).to_have_text(tried)
        # Tried again at once: the service allows one dry run a second (429), so the form waits it out.
        with page.expect_response(lambda resp: resp.request.method == "PATCH" and resp.status == 429):
            form.locator(".jp-ComputeHub-change-try").click()
        sync_api.expect(said).to_have_text("Trying…")
        sync_api.expect(said).to_have_text(tried)
        assert (workload(hub, job)["queue"], workload(hub, job)["name"]) == ("vision", "alice-train")
        queue_in.select_option("vision")
        form.locator(".jp-ComputeHub-change-name").fill("alice-train")
        form.locator(".jp-ComputeHub-change-cpu").fill("lots")
        form.locator(".jp-ComputeHub-change-apply").click()
        sync_api.expect(said).to_have_text(re.compile(r"^CPU must be a number of cores"))
        form.locator(".jp-ComputeHub-change-cpu").fill("2")
        form.locator(".jp-ComputeHub-change-apply").click()
        sync_api.expect(form).to_be_hidden()
        changed = workload(hub, job)
        assert (changed["resources"]["cpu"], changed["resources"]["memory"], changed["queue"]) == \
            ("2000m", 3 * 2**30, "vision"), (changed, memory_before)
        # A job array's waiting tasks (held, so they take no GPU) are one row, named by the array and
        # their indexes; its Release releases each, and its Cancel cancels each (one request each).
        r = hub.call("POST", "/workloads", hub.tokens["alice"], json={
            "name": "sweep", "kind": "training", "resources": {"gpu": 1}, "array": "4-5", "hold": True})
        assert r.status_code == 201, r.text
        tasks = r.json()["tasks"]
        task = page.locator(f".jp-ComputeHub-workload[data-workload-id='{tasks[0]}']")
        sync_api.expect(task.locator(".jp-ComputeHub-name")).to_contain_text(f"sweep {tasks[0]}[4-5]",
                                                                              timeout=30_000)
        sync_api.expect(page.locator(f".jp-ComputeHub-workload[data-workload-id='{tasks[1]}']")).to_have_count(0)
        # Change… on the row: every task of the array in the row's state (held), in one request.
        task.locator(".jp-ComputeHub-change-open").click()
        sync_api.expect(form.locator("h3")).to_have_text(f"Change sweep {tasks[0]}[4-5] (its 2 held tasks)")
        limit_in.fill("20m")
        whole = f"/computehub/workloads/{tasks[0]}"
        with page.expect_request(lambda req: req.method == "PATCH" and req.url.split("?")[0].endswith(whole)) as sent:
            form.locator(".jp-ComputeHub-change-apply").click()
        assert re.search(r"\?tasks=all&state=held(&|$)", sent.value.url), sent.value.url
        assert sent.value.post_data_json == {"time_limit": 1200}
        sync_api.expect(form).to_be_hidden()
        assert [workload(hub, t)["time_limit"] for t in tasks] == [1200, 1200]
        release = task.locator(".jp-ComputeHub-release")
        sync_api.expect(release).to_have_attribute("aria-label", f"Release sweep {tasks[0]}[4-5]")
        one_request = f"/computehub/workloads/{tasks[0]}/array-action"
        with page.expect_request(lambda req: req.url.split("?")[0].endswith(one_request)) as sent:
            release.click()
        assert sent.value.post_data_json == {"action": "release", "states": ["held"]}
        sync_api.expect(task).to_have_attribute("data-state", "pending", timeout=30_000)
        assert [workload(hub, t)["state"] for t in tasks] == ["pending", "pending"]
        # First on the row puts its waiting tasks before her other waiting job, in one request.
        assert workload(hub, job)["explanation"]["position_in_queue"] == 1
        with page.expect_request(lambda req: req.url.split("?")[0].endswith(one_request)) as sent:
            task.locator(".jp-ComputeHub-first").click(timeout=30_000)
        assert sent.value.post_data_json == {"action": "top", "states": ["pending"]}
        wait_for("the sweep first among hers",
                 lambda: workload(hub, job)["explanation"].get("position_in_queue") == 3, 10)
        assert [workload(hub, t)["explanation"]["position_in_queue"] for t in tasks] == [1, 2]
        cancel = task.locator(".jp-ComputeHub-cancel")
        cancel.click()
        sync_api.expect(cancel).to_have_text("Really cancel?")
        with page.expect_request(lambda req: req.url.split("?")[0].endswith(one_request)) as sent:
            cancel.click()
        assert sent.value.post_data_json == {"action": "cancel", "states": ["pending"]}
        sync_api.expect(task).to_have_attribute("data-state", "cancelled", timeout=30_000)
        assert [workload(hub, t)["state"] for t in tasks] == ["cancelled", "cancelled"]

        # The GPUs free up: bob's job is cancelled; alice's is admitted and its launcher reports running.
        assert hub.call("DELETE", f"/workloads/{bob_job}", hub.tokens["bob"]).status_code == 200
        wait_for("alice's job to be admitted", lambda: workload(hub, job)["state"] == "admitted", 30)
        # Wherever she is in Lab, a JupyterLab notification says her waiting job starts.
        sync_api.expect(page.locator(".Toastify__toast", has_text="alice-train is starting")).to_be_visible(
            timeout=30_000)
        r = hub.call("POST", f"/workloads/{job}/status", hub.launcher_token, json={"state": "running"})
        assert r.status_code == 200 and r.json()["state"] == "running", r.text
        t0 = time.monotonic()
        sync_api.expect(row).to_have_attribute("data-state", "running", timeout=30_000)
        sync_api.expect(status).to_have_text("GPU 1×A100 · 87% · 20/80 GB", timeout=30_000)
        print(f"status bar and panel showed 'running' {time.monotonic() - t0:.1f} s after the report")
        sync_api.expect(row.locator(".jp-ComputeHub-facts")).to_contain_text("local GPU 1")
        # The job saves a checkpoint; the launcher reports it, and the panel says when.
        assert row.locator(".jp-ComputeHub-facts").inner_text().find("checkpoint saved") < 0
        time.sleep(0.2)
        r = hub.call("POST", f"/workloads/{job}/status", hub.launcher_token, json={"state": "checkpoint"})
        assert r.status_code == 200 and r.json()["checkpointed_at"], r.text
        sync_api.expect(row.locator(".jp-ComputeHub-facts")).to_contain_text(
            "checkpoint saved < 1 min ago", timeout=30_000)
        here = page.locator(".jp-ComputeHub-workload", has_text="(this server)")
        sync_api.expect(here.locator(".jp-ComputeHub-sparkline")).to_be_visible()
        shoot(page, tmp_path, "lab-running.png")

        # The service stops answering: the panel says so and keeps the last known state.
        pid = hub.service_pid()
        assert pid, "the service's process"
        os.kill(pid, signal.SIGSTOP)
        try:
            banner = page.locator(".jp-ComputeHub-banner")
            sync_api.expect(banner).to_contain_text(re.compile(r"ComputeHub at \S+ is unreachable: .*since .*; "
                                                               r"showing what was known at .*; retrying"),
                                                    timeout=60_000)
            sync_api.expect(status).to_have_text("GPU 1×A100 · 87% · 20/80 GB · offline")
            sync_api.expect(row).to_have_attribute("data-state", "running")
            shoot(page, tmp_path, "lab-offline.png")
        finally:
            os.kill(pid, signal.SIGCONT)
        sync_api.expect(banner).to_contain_text("Updated", timeout=60_000)
        sync_api.expect(status).to_have_text("GPU 1×A100 · 87% · 20/80 GB")

        # Logs: the launcher (played by this test) wrote none, and the panel says so in the service's words.
        row.locator(".jp-ComputeHub-logs-button").click()
        logs_text = page.locator(".jp-ComputeHub-logs-text")
        sync_api.expect(logs_text).to_have_text(f"no logs recorded for workload {job} (yet)")
        sync_api.expect(page.locator(".jp-ComputeHub-logs h3")).to_have_text(f"Logs of {job} (following)")
        # Followed while the job runs: what it writes appears at the next polls, without a click,
        # and the box stays scrolled to its end as lines come.
        log = hub.data_dir / "logs" / f"{job}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("epoch 1 loss 0.9\n")
        sync_api.expect(logs_text).to_have_text("epoch 1 loss 0.9", timeout=30_000)
        with open(log, "a") as f:
            f.write("".join(f"step {i}\n" for i in range(300)) + "epoch 2 loss 0.5\n")
        sync_api.expect(logs_text).to_contain_text("step 299\nepoch 2 loss 0.5", timeout=30_000)
        assert logs_text.inner_text().count("epoch 1 loss 0.9") == 1
        wait_for("the log box at its end", lambda: logs_text.evaluate(
            "e => e.scrollTop + e.clientHeight >= e.scrollHeight - 4"), 10)

        # Cancel from the panel (two clicks: the first asks to confirm).
        row.locator(".jp-ComputeHub-cancel").click()
        row.locator(".jp-ComputeHub-cancel", has_text="Really cancel?").click()
        wait_for("alice's job to be cancelled", lambda: workload(hub, job)["state"] == "cancelled", 30)
        sync_api.expect(row).to_have_attribute("data-state", "cancelled", timeout=30_000)
        sync_api.expect(page.locator(".jp-ComputeHub-logs h3")).to_have_text(f"Logs of {job}")   # no more to follow

        # Preempted work says so. alice's batch job (class 'preemptible') takes GPU 1; bob's
        # training job, of a higher class in the same queue (at its limit of 2), preempts it;
        # the launcher (this test) reports it stopped, and it is back in line, once preempted.
        r = hub.call("POST", "/workloads", hub.tokens["alice"],
                     json={"name": "alice-sweep", "kind": "batch", "resources": {"gpu": 1}})
        assert r.status_code == 201, r.text
        sweep = r.json()["id"]
        wait_for("alice's sweep to be admitted", lambda: workload(hub, sweep)["state"] == "admitted", 30)
        r = hub.call("POST", f"/workloads/{sweep}/status", hub.launcher_token, json={"state": "running"})
        assert r.status_code == 200, r.text
        srow = page.locator(f".jp-ComputeHub-workload[data-workload-id='{sweep}']")
        sync_api.expect(srow).to_have_attribute("data-state", "running", timeout=30_000)
        sync_api.expect(srow.locator(".jp-ComputeHub-facts")).not_to_contain_text("preempted")
        r = hub.call("POST", "/workloads", hub.tokens["bob"],
                     json={"name": "bob-urgent", "kind": "training", "resources": {"gpu": 1}, "time_limit": 600})
        assert r.status_code == 201, r.text
        urgent = r.json()["id"]
        try:
            wait_for("alice's sweep to be preempted", lambda: workload(hub, sweep)["state"] == "preempting", 30)
            r = hub.call("POST", f"/workloads/{sweep}/status", hub.launcher_token, json={"state": "stopped"})
            assert r.status_code == 200, r.text
            w = wait_for("alice's sweep back in line",
                         lambda: (lambda x: x if x["state"] == "pending" else None)(workload(hub, sweep)), 30)
            assert w["preemptions"] == 1, w
            sync_api.expect(srow).to_have_attribute("data-state", "pending", timeout=30_000)
            sync_api.expect(srow.locator(".jp-ComputeHub-facts")).to_contain_text("preempted once")
            toast = page.locator(".Toastify__toast", has_text="alice-sweep was preempted")
            sync_api.expect(toast).to_contain_text("it waits in line again", timeout=30_000)
            toast.get_by_role("button", name="Logs").click()            # opens its log in the panel
            sync_api.expect(page.locator(".jp-ComputeHub-logs h3")).to_contain_text(f"Logs of {sweep}")
            shoot(page, tmp_path, "lab-preempted.png")
        finally:
            hub.call("DELETE", f"/workloads/{sweep}", hub.tokens["alice"])
            hub.call("DELETE", f"/workloads/{urgent}", hub.tokens["bob"])
    finally:
        ctx.close()
    r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
    assert r.status_code in (202, 204), r.text
    wait_for("alice's server process to exit", lambda: "alice" not in server_procs(hub), 60)


def test_my_settings_choose_which_notifications_and_how_often_lab_looks(labhub, browser):
    """Settings > ComputeHub: the admin's default for everyone (JupyterLab's overrides.d in its
    app_settings_dir) is a look every 10 minutes; alice asks for problems only. Lab reads both
    through its settings API; it then looks only when asked (opening the panel); her job that
    waited starts without a word, and its failure is a notification. Its "Mail at end" toggle
    has the service mail her that failure (a real SMTP server receives it)."""
    hub = labhub
    admins = hub.data_dir / "lab-app-settings"
    (admins / "overrides.d").mkdir(parents=True)
    (admins / "overrides.d" / "computehub.json").write_text(json.dumps({"computehub:plugin": {"refreshSeconds": 600}}))
    with open(hub.lab_config / "jupyter_server_config.py", "a") as f:
        f.write(f"\nc.LabApp.app_settings_dir = {str(admins)!r}\n")
    mine = hub.lab_settings / "computehub" / "plugin.jupyterlab-settings"
    mine.parent.mkdir(parents=True)
    mine.write_text(json.dumps({"notifications": "problems"}))
    r = hub_api(hub, "POST", "/users/alice/server", "alice")
    assert r.status_code in (201, 202), r.text
    wait_ready(hub, "alice", timeout=150)
    ctx = browser.new_context(viewport={"width": 1400, "height": 850})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        status = open_lab(page, hub)
        sync_api.expect(status).to_contain_text("GPU 1×A100", timeout=30_000)
        got = page.evaluate("""async () => {
            const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '';
            const r = await fetch('/user/alice/lab/api/settings/computehub:plugin',
                                  {headers: {'X-XSRFToken': decodeURIComponent(xsrf)}});
            return [r.status, await r.json()];
        }""")
        assert got[0] == 200, got
        assert got[1]["schema"]["title"] == "ComputeHub", got
        assert got[1]["schema"]["properties"]["notifications"]["enum"] == ["all", "problems", "none"], got
        assert got[1]["schema"]["properties"]["refreshSeconds"]["default"] == 600, got   # the admin's
        assert got[1]["settings"] == {"notifications": "problems"}, got                      # alice's

        # Every 10 minutes: no look at all in 8 s (the default would look 4 times).
        polls = []
        page.on("request", lambda req: polls.append(time.monotonic()) if "/computehub/workloads" in req.url else None)
        page.wait_for_timeout(3_000)           # the settings land just after the first look
        quiet_from = time.monotonic()
        page.wait_for_timeout(8_000)
        assert not [t for t in polls if t > quiet_from], f"{len(polls)} looks though asked for one in 10 minutes"

        r = hub.call("POST", "/workloads", hub.tokens["alice"],
                     json={"name": "alice-quiet", "kind": "training", "resources": {"gpu": 1}, "hold": True})
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        row = page.locator(f".jp-ComputeHub-workload[data-workload-id='{job}']")
        status.click()                          # opening the panel looks at once
        sync_api.expect(row).to_have_attribute("data-state", "held", timeout=30_000)
        assert hub.call("POST", f"/workloads/{job}/release", hub.tokens["alice"]).status_code == 200
        wait_for("alice's job to be admitted", lambda: workload(hub, job)["state"] == "admitted", 30)
        status.click()
        sync_api.expect(row).to_have_attribute("data-state", "admitted", timeout=30_000)
        # Going home: "Mail at end" (a toggle) asks the service to mail her when it ends.
        toggle = row.locator(".jp-ComputeHub-mail")
        sync_api.expect(toggle).to_have_attribute("aria-pressed", "false")
        sync_api.expect(toggle).to_have_attribute("title", "Mail alice@example.org when it ends")
        mail_path = f"/computehub/workloads/{job}/mail"
        with page.expect_request(lambda req: req.url.split("?")[0].endswith(mail_path)) as sent:
            toggle.click()
        assert sent.value.post_data_json == {"mail": ["end"]}
        sync_api.expect(toggle).to_have_attribute("aria-pressed", "true", timeout=30_000)
        assert workload(hub, job)["metadata"]["mail"] == ["end"]
        r = hub.call("POST", f"/workloads/{job}/status", hub.launcher_token,
                     json={"state": "failed", "exit_code": 3, "reason": "exit code 3: out of memory"})
        assert r.status_code == 200 and r.json()["state"] == "failed", r.text
        status.click()
        toast = page.locator(".Toastify__toast", has_text="alice-quiet failed")
        sync_api.expect(toast).to_contain_text("out of memory", timeout=30_000)
        # The start was a change the look before saw (the row said admitted): not a problem, not said.
        assert page.locator(".Toastify__toast", has_text="alice-quiet is starting").count() == 0
        wait_for("the mail of its end", lambda: hub.inbox.mails, 60)
        assert hub.inbox.subjects() == [f"[ComputeHub] alice-quiet ({job}) failed (exit code 3)"]
        assert hub.inbox.mails[0]["To"] == "alice@example.org"
    finally:
        ctx.close()
    r = hub_api(hub, "DELETE", "/users/alice/server", "alice")
    assert r.status_code in (202, 204), r.text
    wait_for("alice's server process to exit", lambda: "alice" not in server_procs(hub), 60)
