"""What every benchmark's JSON starts with (the machine it ran on) and how it is written."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def save(results: dict, path: str | Path) -> None:
    """Write ``results`` as JSON to ``path`` (its folder made if missing) and say where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"results: {out}")
