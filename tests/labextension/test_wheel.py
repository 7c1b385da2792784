"""`pip install` of the built wheel is enough for JupyterLab: no node at install time.

Builds the computehub wheel once (hatch-jupyter-builder runs `jlpm build:prod`),
installs it with its `lab` extra (JupyterLab, jupyter_server, NVML bindings) into a fresh virtualenv (pip may reuse its
cache), then runs `jupyter labextension list` and `jupyter server extension
list` with a PATH holding only that virtualenv: node, npm and jlpm are not on it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(cmd, timeout=900, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return ANSI.sub("", r.stdout + r.stderr)


pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)   # ~2 min here; a cold pip cache downloads JupyterLab and its dependencies
def test_wheel_installs_an_enabled_prebuilt_extension_without_node(tmp_path):
    t0 = time.monotonic()
    dist = tmp_path / "dist"
    # Without build isolation: the venv has the build requirements (hatchling, hatch-jupyter-builder and
    # jupyterlab for jlpm), which saves installing them again; the build itself is the real one.
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
         "-w", str(dist)], cwd=tmp_path, env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                                                  f"{os.environ.get('PATH', '')}"))
    (wheel,) = dist.glob("computehub-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    data = "computehub-0.1.0.data/data/"
    assert data + "share/jupyter/labextensions/computehub/package.json" in names
    assert data + "share/jupyter/labextensions/computehub/install.json" in names
    assert any(n.startswith(data + "share/jupyter/labextensions/computehub/static/remoteEntry.") for n in names)
    # My settings (Settings > ComputeHub): the schema JupyterLab reads them by.
    assert data + "share/jupyter/labextensions/computehub/schemas/computehub/plugin.json" in names
    assert data + "etc/jupyter/jupyter_server_config.d/computehub.json" in names
    assert not [n for n in names if "node_modules" in n or n.startswith("labextension/src/")], "sources in the wheel"
    built = time.monotonic()

    venv = tmp_path / "venv"
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
    bindir = venv / "bin"
    run([str(bindir / "python"), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
         f"{wheel}[lab]"])
    installed = time.monotonic()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = str(bindir)           # nothing else: no node, npm or jlpm
    env["HOME"] = str(tmp_path / "home")
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("npm", path=env["PATH"]) is None
    out = run([str(bindir / "jupyter"), "labextension", "list"], env=env, cwd=tmp_path)
    line = next((ln for ln in out.splitlines() if ln.strip().startswith("computehub ")), None)
    assert line is not None, out
    assert "enabled" in line and "OK" in line and "(python, computehub)" in line, out
    assert str(venv / "share" / "jupyter" / "labextensions") in out, out

    out = run([str(bindir / "jupyter"), "server", "extension", "list"], env=env, cwd=tmp_path)
    assert re.search(r"^\s*labextension enabled\s*$", out, re.M), out
    assert re.search(r"^\s*labextension\s+OK\s*$", out, re.M), out
    print(f"wheel built in {built - t0:.0f} s, installed in {installed - built:.0f} s, "
          f"checked in {time.monotonic() - installed:.0f} s")
