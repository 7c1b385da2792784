"""The frontend's Jest tests (models, formatting, polling) run as part of the Python suite.

`make test` is the only CI command, so this runs `jlpm test` in labextension/
and fails with Jest's own output if any of its tests fail. jlpm comes with
JupyterLab (the venv); node comes from the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[2] / "labextension"


def jlpm(*args, timeout=600):
    env = dict(os.environ, CI="true", FORCE_COLOR="0")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.run(["jlpm", *args], cwd=LAB, env=env, capture_output=True, text=True, timeout=timeout)


def test_jest_suite_passes():
    if not (LAB / "node_modules" / ".bin" / "jest").exists():
        r = jlpm("install")   # a fresh clone whose editable install skipped the build
        assert r.returncode == 0, f"jlpm install failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    r = jlpm("test", "--ci")
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"jlpm test failed:\n{out[-8000:]}"
    # Jest ran our suites, not nothing.
    assert "model.spec.ts" in out and "poller.spec.ts" in out, out[-4000:]
    assert "failed" not in out.split("Tests:")[-1].splitlines()[0], out[-4000:]
