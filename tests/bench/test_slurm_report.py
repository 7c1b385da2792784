"""The Slurm benchmark's summary over repeated runs (bench/slurm.py): medians, summed failures,
every run printed, and the target judged on the medians. Pure functions on recorded figures;
the benchmark itself (Slurm and a real hub) runs with `computehub bench slurm`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)

import slurm  # noqa: E402


def run(rate, start, failed=0, errors=0):
    return {"jobs": 100, "submitters": 4, "gpu": False, "submit_errors": errors, "failed": failed,
            "submit_rate": rate, "start_rate": start, "all_done_s": 100 / start, "first_start_s": None,
            "scheduler_cpu_s": 1.0, "agents_cpu_s": 2.0}


def test_medians_of_the_runs_and_failures_summed():
    m = slurm.median_of([run(100, 50, failed=1), run(300, 40), run(200, 60, errors=2)])
    assert m["submit_rate"] == 200 and m["start_rate"] == 50
    assert m["failed"] == 1 and m["submit_errors"] == 2
    assert m["first_start_s"] is None and m["gpu"] is False and m["submitters"] == 4
    assert [r["submit_rate"] for r in m["runs"]] == [100, 300, 200]


def test_the_target_is_judged_on_the_medians_and_every_run_is_shown():
    slurm_runs = [run(100, 50), run(160, 50), run(120, 50)]      # median 120 subm/s
    ch_runs = [run(230, 200), run(500, 90), run(250, 210)]       # median 250: 2.08×; one run 1.44×
    text = slurm.report({"phases": {"trivial-4sub": {"jobs": 100, "slurm": slurm.median_of(slurm_runs),
                                                     "computehub": slurm.median_of(ch_runs)}}})
    assert "each run, submissions/s: Slurm 100/160/120, ComputeHub 230/500/250" in text
    assert "on submissions/s: met (2.08×)" in text
    assert "on jobs started/s: met (4.00×)" in text
    ch_runs[1] = run(500, 60)
    ch_runs[2] = run(250, 90)                                    # median start rate 90: 1.80×
    text = slurm.report({"phases": {"gpu-1sub": {"jobs": 100, "slurm": slurm.median_of(slurm_runs),
                                                 "computehub": slurm.median_of(ch_runs)}}})
    assert "on jobs started/s: MISSED (1.80×)" in text


@pytest.mark.parametrize("args", [["--repeat", "0"], ["--jobs", "0"], ["--phases", "trivial:0"]])
def test_bad_options_are_one_line_errors(args):
    r = subprocess.run([sys.executable, os.path.join(BENCH, "slurm.py"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "bench/slurm.py:" in r.stderr


def test_an_array_phase_is_one_submission_of_at_most_1000_tasks():
    assert slurm.parse_phases("trivial:4,array:1") == [("trivial", 4), ("array", 1)]
    assert (slurm.jobs_of("array", 2000), slurm.jobs_of("array", 300), slurm.jobs_of("gpu", 2000)) == (1000, 300, 2000)
