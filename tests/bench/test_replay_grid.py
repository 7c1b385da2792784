"""``computehub bench replay-grid`` on a small real trace (not its figures): the default under
two settings beside a variant, the checks it counts, and that the reference runs it shares
between settings are what those settings would give. Nothing is emulated: the replay drives
the scheduler directly."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from scheduler.replay import REALISTIC, SAMPLE_TRACE, default_capacity, load, run, summarize
from test_bench_smoke import computehub

JOBS = 150


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grid")
    (tmp / "traces").mkdir()
    shutil.copy(SAMPLE_TRACE, tmp / "traces" / "cluster05.csv")
    out = tmp / "grid.json"
    r = subprocess.run([computehub(), "bench", "replay-grid", "--traces", str(tmp / "traces"), "--clusters", "05",
                        "--max-jobs", str(JOBS), "--settings", "4:3,5:2", "--variant", "preemption=false",
                        "--workers", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text()), r.stdout


def test_the_grid_counts_each_settings_checks_for_the_default_and_the_variant(grid):
    data, stdout = grid
    assert data["settings"] == ["4:3", "5:2"] and data["variant"] == {"preemption": False}
    for arm in ("default", "variant"):
        for setting, r in data["arms"][arm].items():
            checks = r["traces"]["cluster05"]["checks"]
            assert r["checks"] == len(checks) == 5, checks
            assert r["met"] == sum(c["met"] for c in checks)
            assert len(r["missed"]) == r["checks"] - r["met"]
            assert r["traces"]["cluster05"]["jobs"] == JOBS
            line = f"{setting}: {r['met']}/{r['checks']}, {r['violations']} violations"
            assert line in stdout, (line, stdout)
    # The variant is what it says: with preemption off, nothing is preempted; the default preempts.
    assert all(r["traces"]["cluster05"]["preemptions"] == 0 for r in data["arms"]["variant"].values())
    assert any(r["traces"]["cluster05"]["preemptions"] > 0 for r in data["arms"]["default"].values())
    assert "Variant / default" in stdout and "preemptions                median 0.000" in stdout


def test_the_settings_change_the_default_and_not_the_shared_references(grid):
    """The references are replayed once (4 teams, limits up to 3×) for every setting: under the
    other setting (5 teams, limits up to 2×) they give the same figures, while the default's
    own figures there are that setting's."""
    data, _ = grid
    jobs = load(SAMPLE_TRACE, n_teams=5, limit=JOBS)
    cap = default_capacity(jobs)
    for policy, shared in data["references"]["cluster05"].items():
        m = summarize(run(jobs, cap, policy, n_teams=5, declared_limits="policy", restart=REALISTIC,
                          overestimate=2.0))
        for key in ("jct_avg_h", "jct_p99_h", "gpu_utilisation", "preemptions"):
            assert m[key] == pytest.approx(shared[key]), (policy, key)
    m = summarize(run(jobs, cap, "default", n_teams=5, declared_limits="policy", restart=REALISTIC,
                      overestimate=2.0))
    there = data["arms"]["default"]["5:2"]["traces"]["cluster05"]
    assert (there["jct_avg_h"], there["preemptions"]) == (pytest.approx(m["jct_avg_h"]), m["preemptions"])


@pytest.mark.parametrize("args, words", [
    (["--settings", "4"], ["--settings expects TEAMS:FACTOR", "'4'"]),
    (["--settings", "0:3"], ["--settings expects TEAMS:FACTOR", "'0:3'"]),
    (["--settings", "4:0.5"], ["factor ≥ 1", "'4:0.5'"]),
    (["--variant", "nosuch=1"], ["--variant expects SETTING=VALUE", "'nosuch=1'"]),
    (["--variant", "swap_loss=-5"], ["--variant swap_loss=-5", "should not be less than 0"]),
    (["--workers", "0"], ["--workers must be at least 1"]),
])
def test_grid_errors_are_one_line(args, words):
    r = subprocess.run([computehub(), "bench", "replay-grid", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr
