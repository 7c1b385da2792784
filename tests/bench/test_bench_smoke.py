"""A short smoke run of the benchmarks (not their figures): every replay policy on a small real
trace with the realistic preemption cost, checked for the scheduler's invariants after every
cycle; ``computehub bench replay`` and ``computehub bench scale`` through the console script on
tiny inputs; and the command's one-line errors. Nothing is emulated (no GPUs are involved:
replay and the scale benchmark drive the scheduler directly)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from scheduler.invariants import violations
from scheduler.replay import POLICIES, REALISTIC, SAMPLE_TRACE, load, run, summarize
from scheduler.replay.guarantee import GuaranteeWatch

JOBS = 150
CAPACITY = 16


def computehub() -> str:
    exe = shutil.which("computehub", path=os.path.dirname(sys.executable)) or shutil.which("computehub")
    if exe is None:
        pytest.fail("the computehub console script is not installed; run `pip install -e .`", pytrace=False)
    return exe


@pytest.fixture(scope="module")
def jobs():
    return load(SAMPLE_TRACE, limit=JOBS)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_keeps_the_invariants_and_finishes_every_job(jobs, policy):
    broken = []

    def check(sched, now, res, of):
        broken.extend(violations(sched.state))

    watch = GuaranteeWatch(then=check)
    out = run(jobs, CAPACITY, policy, declared_limits="policy", restart=REALISTIC, after_cycle=watch)
    assert broken == []
    m = summarize(out)
    guarantee = watch.finish(max(r.finish for r in out.records))
    assert m["jobs"] == JOBS
    for r in out.records:
        assert r.finish is not None and r.first_admit is not None
        assert r.finish >= r.job.submit + r.job.duration - 1e-6
        # Preemption costs: what was lost is held on top of the job's own GPU-seconds.
        assert r.busy_gpu_seconds == pytest.approx(r.job.gpus * r.job.duration + r.lost_gpu_seconds)
        assert (r.lost_gpu_seconds > 0) == (r.preemptions > 0) or r.lost_gpu_seconds == 0
    assert (m["preemptions"] == 0) == (not POLICIES[policy].config.preemption) or m["preemptions"] == 0
    if POLICIES[policy].team_queues:
        # Work a team is guaranteed starts within about one preempt_after (10 min) of being owed
        # (bench/replay.py reports every wait beyond preempt_after + 60 s as a violation).
        assert guarantee["guarantee_max_wait_s"] <= 2 * 600, guarantee


def test_bench_replay_through_the_cli(tmp_path):
    (tmp_path / "traces").mkdir()
    shutil.copy(SAMPLE_TRACE, tmp_path / "traces" / "cluster05.csv")
    out = tmp_path / "replay.json"
    r = subprocess.run([computehub(), "bench", "replay", "--traces", str(tmp_path / "traces"), "--clusters", "05",
                        "--max-jobs", "120", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())["cluster05"]
    assert set(data["results"]) == set(POLICIES)
    assert all(res["jobs"] == 120 for res in data["results"].values())
    assert {t["target"][:7] for t in data["targets"]["default"]} >= {"avg JCT", "p99 JCT", "GPU uti", "no guar"}
    assert "Average JCT in hours" in r.stdout and "target" in r.stdout
    # the floors no policy can beat hold for every policy, and the ideal is nearly reached
    floor = data["floors"]
    assert 0 < floor["jct_p99_floor_h"] and 0 < floor["makespan_floor_h"]
    for res in data["results"].values():
        assert res["jct_p99_h"] >= floor["jct_p99_floor_h"] - 1e-9, res["policy"]
        assert res["makespan_h"] >= floor["makespan_floor_h"] - 1e-9, res["policy"]
    assert min(res["makespan_h"] for res in data["results"].values()) < 1.5 * floor["makespan_floor_h"]
    assert "no policy can beat: p99 JCT" in r.stdout
    # bench/tables.py renders the README's tables from the same JSON: one row per judged policy
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    try:
        import tables
    finally:
        sys.path.pop(0)
    md = tables.replay(json.loads(out.read_text()))
    met = sum(t["met"] for t in data["targets"]["default"])
    assert f"Targets met by `default`: {met} of {len(data['targets']['default'])}." in md
    assert "| cluster05 | default |" in md and "| cluster05 | default-age |" in md
    assert f"no policy can beat a p99 JCT of {floor['jct_p99_floor_h']:.1f} h" in md
    # --engine overrides a setting of the ComputeHub policies only: with preemption off the
    # default preempts nothing, and FIFO's figures do not change.
    off = tmp_path / "off.json"
    r = subprocess.run([computehub(), "bench", "replay", "--traces", str(tmp_path / "traces"), "--clusters", "05",
                        "--max-jobs", "120", "--policies", "default", "--engine", "preemption=false",
                        "--json", str(off)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    changed = json.loads(off.read_text())["cluster05"]["results"]
    assert changed["fifo"] == {**data["results"]["fifo"], "wall_seconds": changed["fifo"]["wall_seconds"],
                               "cycle_seconds": changed["fifo"]["cycle_seconds"]}
    assert data["results"]["default"]["preemptions"] > 0 and changed["default"]["preemptions"] == 0


def test_bench_scale_through_the_cli(tmp_path):
    out = tmp_path / "scale.json"
    r = subprocess.run([computehub(), "bench", "scale", "--nodes", "4", "--pending", "50,200", "--cycles", "3",
                        "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["nodes"], x["pending"]) for x in rows] == [(4, 50), (4, 200)]
    assert all(x["median_ms"] > 0 and x["p95_ms"] >= x["median_ms"] and x["peak_rss_mb"] > 0 for x in rows)
    assert all("growth_exponent" in x for x in rows)
    assert "fitted exponent" in r.stdout


def test_bench_scale_with_job_arrays(tmp_path):
    """``--arrays``: capped job arrays in the pending work; the cycle still admits work."""
    out = tmp_path / "scale.json"
    r = subprocess.run([computehub(), "bench", "scale", "--nodes", "4", "--pending", "200", "--cycles", "3",
                        "--arrays", "0.5", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    row = json.loads(out.read_text())["rows"][0]
    assert row["arrays"] == 0.5 and row["fill_admitted"] > 0 and row["pending_after"] >= 150


def test_bench_history_through_the_cli(tmp_path):
    """A short run of bench/history.py: two real hubs, on a short history and on a longer one,
    the same reads timed on both."""
    out = tmp_path / "history.json"
    r = subprocess.run([computehub(), "bench", "history", "--workloads", "400", "--repeat", "2",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["workloads"] == 400 and data["small"] == 4 and set(data["short"]) == set(data["year"])
    mine = "alice: %jobs --all (latest 1000) (ms)"
    assert data["short"][mine]["items"] < data["year"][mine]["items"] < 400
    assert all(v["median"] > 0 for v in data["year"].values())
    assert "ratio" in r.stdout


def test_bench_array_ops_through_the_cli(tmp_path):
    """A short run of bench/array_ops.py on a real hub: both of ComputeHub's ways act on every task."""
    out = tmp_path / "array_ops.json"
    r = subprocess.run([computehub(), "bench", "array-ops", "--tasks", "12", "--repeat", "1", "--no-slurm",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    times = json.loads(out.read_text())["times"]
    assert set(times) == {"one request", "a request per task"}
    assert all(len(v) == 1 and v[0] > 0 for way in times.values() for v in way.values())
    for way in times:                            # every task acted on, each way
        assert f"computehub, {way}, run 1: release 12 tasks" in r.stdout
        assert f"computehub, {way}, run 1: update 11 tasks" in r.stdout      # one runs: 11 wait
        assert f"computehub, {way}, run 1: hold 11 tasks" in r.stdout
        assert f"computehub, {way}, run 1: cancel 12 tasks" in r.stdout
    assert "per task / one" in r.stdout


def test_bench_panel_through_the_cli(tmp_path):
    """A short run of bench/panel_poll.py: the panel's look asks once for every explanation, and the
    old way once more for the array's first waiting task and for each other waiting job."""
    out = tmp_path / "panel.json"
    r = subprocess.run([computehub(), "bench", "panel", "--tasks", "20", "--looks", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    ways = json.loads(out.read_text())["ways"]
    before, now = ways["one request per row (before)"], ways["explain=true (now)"]
    assert before["requests"] == 4 + 1 + 3 and now["requests"] == 4      # the sweep's row and 3 jobs
    assert before["rows"] == now["rows"] >= 23 and "before / this" in r.stdout


def test_bench_mail_through_the_cli(tmp_path):
    """A short run of bench/mail_rounds.py: every job's mail is delivered to the SMTP server, and
    following the log alone sends none (the benchmark checks both counts itself)."""
    out = tmp_path / "mail.json"
    r = subprocess.run([computehub(), "bench", "mail", "--jobs", "20", "--repeat", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert [x["mails"] for x in runs["mail"]] == [20] and [x["mails"] for x in runs["none"]] == [0]
    assert runs["mail"][0]["events"] == runs["none"][0]["events"] > 20
    assert "ratio mail / none" in r.stdout


@pytest.mark.parametrize("args, words", [
    (["bench", "nope"], ["unknown benchmark", "'nope'"]),
    (["bench"], ["scale", "replay", "slurm"]),
    (["bench", "replay", "--engine", "nosuch=1"], ["--engine expects SETTING=VALUE", "swap_loss", "'nosuch=1'"]),
    (["bench", "replay", "--engine", "swap_loss=-5"], ["--engine swap_loss=-5", "should not be less than 0"]),
    (["bench", "replay", "--engine", "release_on_preempt=false"], ["--engine expects SETTING=VALUE"]),
])
def test_bench_errors_are_one_line(args, words):
    r = subprocess.run([computehub(), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    text = r.stderr + r.stdout
    assert "Traceback" not in text
    for w in words:
        assert w in text


def _short_long_line_run(name: str, tmp_path, pending: int = 60):
    """A short run of one of bench/long_line.py's benchmarks: (the run, its JSON)."""
    out = tmp_path / f"{name}.json"
    r = subprocess.run([computehub(), "bench", name, "--nodes", "20", "--pending", str(pending), "--repeat", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    return r, json.loads(out.read_text())


def _long_line_bench(name: str, tmp_path):
    """``_short_long_line_run`` of a benchmark with rows at three places in line."""
    r, data = _short_long_line_run(name, tmp_path)
    assert list(data["rows"]) == ["front", "a quarter down", "halfway"]
    return r, data


def test_bench_loop_lag_through_the_cli(tmp_path):
    """A short run of bench/loop_lag.py: each way timed, with the loop's stalls, at three places in line."""
    r, data = _long_line_bench("loop-lag", tmp_path)
    for row in data["rows"].values():
        for way in ("on the loop (before)", "worker thread", "line plan (now)"):
            m = row[way]
            assert m["query_ms"] > 0 and m["ticks_per_s"] > 0
            # The query ran on the loop: it stalled at least that long (a little less: the ticker's own sleep).
            assert way != "on the loop (before)" or m["stall_ms"] >= m["query_ms"] * 0.5
    assert "line plan (now): longest stall / before" in r.stdout


def test_bench_what_if_through_the_cli(tmp_path):
    """A short run of bench/what_if.py: each way timed for jobs at three places in the line."""
    r, data = _long_line_bench("what-if", tmp_path)
    assert data["rows"]["front"]["position"] < data["rows"]["halfway"]["position"] <= data["pending"]
    assert all(row[way] > 0 for row in data["rows"].values() for way in
               ("position query", "dry run (kept explanation)", "dry run (both simulated)"))
    assert "dry run / query" in r.stdout


def test_bench_own_order_through_the_cli(tmp_path):
    """A short run of bench/own_order.py: the order timed with nothing, one user's work, and 1 in 100 put first."""
    r, data = _short_long_line_run("own-order", tmp_path, pending=300)
    rows = data["rows"]
    assert list(rows) == ["nothing put first", "one user's 20 put first", "1 in 100 put first"]
    assert rows["nothing put first"]["put_first"] == 0 and rows["1 in 100 put first"]["put_first"] >= 3
    assert 0 < rows["one user's 20 put first"]["put_first"] <= 20 and all(row["ms"] > 0 for row in rows.values())
    assert "/ none" in r.stdout


def test_bench_line_plan_through_the_cli(tmp_path):
    """A short run of bench/line_plan.py: 20 workloads down the line estimated one by one, and one plan."""
    r, data = _short_long_line_run("line-plan", tmp_path)
    picks = data["picks"]
    assert len(picks) == 20 and picks[0]["position"] == 1 and picks[-1]["position"] == data["pending"]
    assert data["plan_median_s"] > 0 and data["own_total_s"] > 0 and data["estimated_by_plan"] > 0
    assert data["compared"] == data["later_in_plan"] + data["earlier_in_plan"] + sum(
        p["own_eta_h"] == p["plan_eta_h"] for p in picks if p["own_eta_h"] is not None)
    assert "own estimates" in r.stdout and "the plan starts" in r.stdout
    # Held work after running work: the plan with it gives each a start, as its own estimate does.
    assert len(data["held"]) == 3 and data["plan_with_held_median_s"] > 0 and "the plan with them" in r.stdout
    assert all(h["plan_eta_h"] is not None and h["own_eta_h"] is not None for h in data["held"]), data["held"]
