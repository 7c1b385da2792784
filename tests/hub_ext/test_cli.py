"""The installed ``computehub`` console script: simulate, demo, and bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from scheduler.replay import SAMPLE_TRACE


def computehub() -> str:
    exe = shutil.which("computehub", path=os.path.dirname(sys.executable)) or shutil.which("computehub")
    if exe is None:
        pytest.fail("the computehub console script is not installed; run `pip install -e .`", pytrace=False)
    return exe


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([computehub(), *args], capture_output=True, text=True, timeout=timeout)


def sample_jobs() -> int:
    lines = SAMPLE_TRACE.read_text().splitlines()
    return sum(1 for line in lines[1:] if line.strip())


def test_simulate_json_on_the_sample():
    r = cli("simulate", "--trace", str(SAMPLE_TRACE), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["trace"] == SAMPLE_TRACE.name
    assert out["capacity_gpus"] == 16        # derived by the traces README rule
    (res,) = out["results"]
    assert res["policy"] == "default"
    assert res["jobs"] == sample_jobs()
    for key in ("capacity_gpus", "jct_avg_s", "jct_median_s", "jct_p99_s", "jct_avg_h", "queue_avg_s",
                "queue_p99_s", "makespan_s", "gpu_utilisation", "preemptions", "jain_fairness",
                "wall_seconds", "cycles"):
        assert key in res, key
    # what no policy can beat: below this replay's figures, and not far below the makespan
    floor = out["floors"]
    assert 0 < floor["jct_p99_floor_h"] <= res["jct_p99_h"] + 1e-9
    assert res["makespan_h"] / 1.5 < floor["makespan_floor_h"] <= res["makespan_h"] + 1e-9


def test_simulate_compare_table_and_given_capacity():
    r = cli("simulate", "--trace", "sample", "--compare", "--capacity-gpus", "24", "--policy", "sjf")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "24 GPUs" in lines[0]
    header = lines[1].split()
    assert header == ["metric", "fifo", "sjf"]
    assert any(line.startswith("avg JCT (h)") for line in lines)
    assert lines[-1].startswith("No policy can beat, on this trace: a p99 JCT of ")


def test_replay_demo_shows_policies_and_explanations():
    r = cli("demo", "--replay")
    assert r.returncode == 0, r.stderr
    assert "fifo" in r.stdout and "default" in r.stdout
    assert "why:" in r.stdout and "ETA:" in r.stdout and "position" in r.stdout
    # The first in line, by the order its positions are counted in; it declared an estimate.
    assert "\n    position 1 of " in r.stdout and re.search(r"declared [\d.]+ h, runs [\d.]+ h", r.stdout)
    assert re.search(r"GPU-h lost to preemption +0\.0 +[1-9]", r.stdout), r.stdout   # preemption is charged
    # Work larger than its team's guarantee would start on borrowed GPUs: a lower bound.
    assert "ETA:  in at least " in r.stdout and "at the earliest: it would start on GPUs beyond" in r.stdout


@pytest.fixture
def malformed(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\nb,zero,10,1\n")
    return str(p)


@pytest.mark.parametrize("args, words", [
    (["simulate", "--trace", "no-such-trace.csv"], ["not found"]),
    (["simulate", "--trace", "sample", "--capacity-gpus", "lots"], ["--capacity-gpus", "'lots'"]),
    (["simulate", "--trace", "sample", "--capacity-gpus", "4"], ["too small", "8 GPUs"]),
    (["simulate", "--trace", "sample", "--policy", "round-robin"], ["--policy", "round-robin"]),
    (["simulate", "--trace", "MALFORMED"], ["bad.csv:3:", "submission_time"]),
    (["simulate"], ["--trace"]),
    (["simulate", "--trace"], ["--trace"]),
    (["simulate", "--trace", "sample", "--colour"], ["--colour"]),
    (["simulate", "--trace", "sample", "--teams", "0"], ["--teams"]),
    (["launch-rockets"], ["unknown command"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words, malformed):
    args = [malformed if a == "MALFORMED" else a for a in args]
    r = cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("computehub: error: ")
    for w in words:
        assert w in lines[0]
    assert r.stdout == ""
