"""`computehub demo` starts the whole platform: a real hub, the real proxy, the service."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests
from realhub import free_port


def test_demo_runs_the_platform_and_stops_cleanly(tmp_path):
    port = free_port()
    exe = Path(sys.executable).parent / "computehub"
    proc = subprocess.Popen([str(exe), "demo", f"--port={port}", f"--data-dir={tmp_path / 'demo'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        up = False
        while time.time() < deadline and not up and proc.poll() is None:
            try:
                up = requests.get(base + "/services/computehub/api/v1/me", timeout=2).status_code == 401
            except requests.RequestException:
                pass
            time.sleep(0.3)
        assert up, f"the service did not answer behind the proxy: {proc.poll()}"
        # Log in as the demo admin through the hub's form and reach the service API.
        s = requests.Session()
        s.get(base + "/hub/login", timeout=5)
        r = s.post(base + "/hub/login", data={"username": "admin", "password": "demo",
                                               "_xsrf": s.cookies.get("_xsrf")}, timeout=10)
        # The demo lands users on ComputeHub's page after login (through the hub's OAuth).
        assert r.status_code == 200 and r.url.rstrip("/").endswith("/services/computehub"), r.url
        assert "admin" in r.text
        tok = s.post(base + "/hub/api/users/admin/tokens", json={"note": "demo test"},
                     headers={"X-XSRFToken": s.cookies.get("_xsrf", path="/hub/")}, timeout=10).json()["token"]
        h = {"Authorization": f"token {tok}"}
        nodes = requests.get(base + "/services/computehub/api/v1/nodes", headers=h, timeout=10).json()["nodes"]
        assert nodes and nodes[0]["simulated"] is True and nodes[0]["labels"]["computehub/simulated"] == "true"
        queues = {q["name"]: q for q in requests.get(base + "/services/computehub/api/v1/queues", headers=h,
                                                     timeout=10).json()["queues"]}
        assert queues["vision"]["groups"] == ["vision"] and queues["nlp"]["groups"] == ["nlp"]
        assert (tmp_path / "demo" / "service" / "computehub.sqlite").exists()
    finally:
        proc.send_signal(signal.SIGINT)          # Ctrl-C on the demo: it stops the hub, which stops the rest
        try:
            out, _ = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    text = out.decode()
    assert "Log in at http://127.0.0.1:" in text and re.search(r"users: alice, bob", text)
    assert proc.returncode is not None
    leftover = subprocess.run(["pgrep", "-f", f"hub_ext serve.*{tmp_path}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "the service outlived the demo"
