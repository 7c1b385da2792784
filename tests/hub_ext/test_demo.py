"""`computehub demo` starts the whole platform: a real hub, the real proxy, the service."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from realhub import free_port


def _free_block(n: int = 4) -> int:
    """A port p with p..p+n-1 all free (the demo uses the next three for hub, proxy API, service)."""
    for _ in range(50):
        p = free_port()
        if p + n >= 65536:
            continue
        try:
            socks = []
            for q in range(p, p + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports")


def test_demo_runs_the_platform_and_stops_cleanly(tmp_path):
    port = _free_block()
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
        # Log in as the demo admin through the hub's form and reach the service API. The admin has
        # a random password of its own, kept in the data folder; the users' shared one is not it.
        admin_password = (tmp_path / "demo" / "admin_password").read_text().strip()
        assert len(admin_password) >= 32 and oct((tmp_path / "demo" / "admin_password").stat().st_mode)[-3:] == "600"
        s = requests.Session()
        s.get(base + "/hub/login", timeout=5)
        r = s.post(base + "/hub/login", data={"username": "admin", "password": "computehub-demo",
                                               "_xsrf": s.cookies.get("_xsrf")}, timeout=10)
        assert r.url.rstrip("/").endswith("/hub/login"), r.url     # refused: still the login form
        r = s.post(base + "/hub/login", data={"username": "admin", "password": admin_password,
                                               "_xsrf": s.cookies.get("_xsrf")}, timeout=10)
        carol = requests.Session()          # a user logs in with the shared password the demo prints
        carol.get(base + "/hub/login", timeout=5)
        c = carol.post(base + "/hub/login", data={"username": "carol", "password": "computehub-demo",
                                                  "_xsrf": carol.cookies.get("_xsrf")}, timeout=10)
        assert c.status_code == 200 and c.url.rstrip("/").endswith("/services/computehub"), c.url
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
        # A notebook spawn goes through the queue: alice's server gets a GPU from the simulated node.
        hub_api = base + "/hub/api/users/alice"
        assert requests.post(hub_api + "/server", headers=h, timeout=30).status_code in (201, 202)
        deadline = time.time() + 90
        while time.time() < deadline:
            model = requests.get(hub_api, headers=h, timeout=10).json()
            if model["servers"].get("", {}).get("ready"):
                break
            time.sleep(0.5)
        assert model["servers"][""]["ready"], model
        mine = requests.get(base + "/services/computehub/api/v1/workloads?user=alice", headers=h,
                            timeout=10).json()["workloads"]
        assert [w["kind"] for w in mine] == ["notebook"] and mine[0]["state"] == "running"
        assert mine[0]["placement"][0]["gpus"] == [0]
        assert requests.delete(hub_api + "/server", headers=h, timeout=60).status_code in (202, 204)
        # Mail that work asks for lands in the demo's Maildir (no mail server needed to see it).
        api = base + "/services/computehub/api/v1/workloads"
        r = requests.post(api, headers=h, timeout=10, json={"name": "mailed", "kind": "batch", "mail": ["end"], "queue": "nlp",
                                                            "resources": {"gpu": 0, "cpu": "100m"}})
        assert r.status_code == 201, r.text
        assert requests.delete(f"{api}/{r.json()['id']}", headers=h, timeout=10).status_code == 200
        inbox = tmp_path / "demo" / "mail" / "new"
        deadline = time.time() + 60
        while time.time() < deadline and not (inbox.is_dir() and any(inbox.iterdir())):
            time.sleep(0.5)
        (mail,) = [p.read_text() for p in inbox.iterdir()]
        assert f"Subject: [ComputeHub] mailed ({r.json()['id']}) was cancelled" in mail, mail
        assert "To: admin@demo.invalid" in mail, mail
        me = requests.get(base + "/services/computehub/api/v1/me", headers=h, timeout=10).json()
        assert (me["mail_address"], me["mail_user_domains"]) == ("admin@demo.invalid", ["demo.invalid"]), me
    finally:
        proc.send_signal(signal.SIGINT)          # Ctrl-C on the demo: it stops the hub, which stops the rest
        try:
            out, _ = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    text = out.decode()
    assert "Log in at http://127.0.0.1:" in text and re.search(r"users: alice, bob", text)
    assert "the users' password: computehub-demo" in text and "admin_password" in text
    assert "deprecated" not in text, [x for x in text.splitlines() if "deprecated" in x]
    assert proc.returncode is not None
    leftover = subprocess.run(["pgrep", "-f", f"hub_ext serve.*{tmp_path}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "the service outlived the demo"
