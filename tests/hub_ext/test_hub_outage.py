"""While JupyterHub's API does not answer (a hub restart, an upgrade), the service says so with
a 503 its clients retry on, not a 500. The real service, on its own; the hub is simply not
there (its API URL names a port nobody listens on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import requests
from realhub import free_port


def test_an_unreachable_hub_is_a_503_to_retry_not_a_500(tmp_path):
    port, nobody = free_port(), free_port()
    env = dict(os.environ, JUPYTERHUB_API_URL=f"http://127.0.0.1:{nobody}/hub/api", JUPYTERHUB_API_TOKEN="t" * 32,
               JUPYTERHUB_SERVICE_PREFIX="/services/computehub/", JUPYTERHUB_SERVICE_NAME="computehub")
    log = open(tmp_path / "service.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "hub_ext", "serve", f"--data-dir={tmp_path}", "--config=",
                             f"--url=http://127.0.0.1:{port}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/services/computehub/api/v1/me"
        deadline = time.time() + 30
        while True:
            try:
                r = requests.get(url, headers={"Authorization": "token abc"}, timeout=5)
                break
            except requests.ConnectionError:
                assert time.time() < deadline and proc.poll() is None, (tmp_path / "service.log").read_text()
                time.sleep(0.2)
        assert r.status_code == 503, r.text
        assert r.json() == {"error": "hub_unavailable", "message": r.json()["message"]}
        assert "JupyterHub's API does not answer" in r.json()["message"]
        r = requests.post(url.replace("/me", "/workloads"), json={"queue": "q"}, timeout=5,
                          headers={"Authorization": "token abc"})
        assert r.status_code == 503
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
