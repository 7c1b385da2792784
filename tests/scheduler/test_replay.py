"""Trace replay: trace reading, the event loop on the real Scheduler, and the metrics."""

from __future__ import annotations

import math

import pytest

from scheduler import Scheduler
from scheduler.replay import (POLICIES, SAMPLE_TRACE, default_capacity, jain, load, mean_gpus_busy, percentile,
                              run, simulate, summarize, team_of)
from scheduler.replay.costs import Restart
from scheduler.replay.simulate import check_fits, node_sizes

HEADER = "job_id,submission_time,duration,num_gpu\n"


def write(tmp_path, rows: str, header: str = HEADER, name: str = "t.csv"):
    p = tmp_path / name
    p.write_text(header + rows)
    return p


def jcts(outcome) -> dict[str, float]:
    return {r.job.id: r.jct for r in outcome.records}


# --- trace reading ------------------------------------------------------------

def test_team_rule_is_first_8_hex_digits_modulo_teams():
    assert team_of("00000003-ffff-ffff-ffff-ffffffffffff") == "team-3"
    assert team_of("0000000a-0000") == "team-2"                  # 10 % 4
    assert team_of("930dd644-e119-8ce9-0935-e6148a7c7bed") == f"team-{0x930dd644 % 4}"
    assert team_of("0000-0007-9999", n_teams=5) == "team-2"      # dashes removed first: 00000007 % 5
    assert team_of("not-hex-at-all") == team_of("not-hex-at-all")   # fallback is deterministic
    with pytest.raises(ValueError):
        team_of("00000001", n_teams=0)


def test_load_accepts_extra_columns_sorts_and_makes_gangs(tmp_path):
    p = write(tmp_path, "x,16,0000000b,10,50\ny,1,0000000a,20,5\nz,12,0000000c,30,60\n",
              header="extra,num_gpu,job_id,duration,submission_time\n")
    jobs = load(p)
    assert [j.id for j in jobs] == ["0000000a", "0000000b", "0000000c"]
    a, b, c = jobs
    assert (a.submit, a.duration, a.gpus, a.workers, a.team, a.line) == (5.0, 20.0, 1, 1, "team-2", 3)
    assert (b.gpus, b.workers, b.gpus_per_worker) == (16, 2, 8)
    assert (c.gpus, c.workers, c.gpus_per_worker) == (12, 2, 6)


def test_load_testbed_style_columns(tmp_path):
    header = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
    p = write(tmp_path, "bdd640fb-0667,3715485,3249,deepspeech2,3716178,32,1,1075\n", header=header)
    (j,) = load(p)
    assert (j.submit, j.duration, j.gpus) == (3715485.0, 1075.0, 1)


@pytest.mark.parametrize("rows, words", [
    ("a1,0,10,1\na2,zero,10,1\n", [":3:", "submission_time", "'zero'"]),
    ("a1,0,10,1\na2,0,-5,1\n", [":3:", "duration"]),
    ("a1,0,0,1\n", [":2:", "duration must be positive"]),
    ("a1,0,10,1.5\n", [":2:", "num_gpu", "'1.5'"]),
    ("a1,0,10,0\n", [":2:", "num_gpu"]),
    ("a1,0,10\n", [":2:", "fields"]),
    ("a1,0,10,1\na1,5,10,1\n", [":3:", "twice"]),
    (",0,10,1\n", [":2:", "job_id"]),
    ("a1,nan,10,1\n", [":2:", "submission_time"]),
])
def test_malformed_rows_name_the_line(tmp_path, rows, words):
    p = write(tmp_path, rows)
    with pytest.raises(ValueError) as e:
        load(p)
    for w in words:
        assert w in str(e.value)


def test_missing_column_and_empty_file(tmp_path):
    with pytest.raises(ValueError, match="missing column.*num_gpu"):
        load(write(tmp_path, "a,1,2\n", header="job_id,submission_time,duration\n"))
    with pytest.raises(ValueError, match="empty"):
        load(write(tmp_path, "", header=""))
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.csv")


def test_capacity_rule_and_fit_check(tmp_path):
    # 4 GPU-hours of work over a 1-hour span: 4 GPUs busy → 8 × ceil(4 / 0.8 / 8) = 8
    jobs = load(write(tmp_path, "a,0,3600,2\nb,3600,3600,2\n"))
    assert mean_gpus_busy(jobs) == pytest.approx(4.0)
    assert default_capacity(jobs) == 8
    # never less than the largest job (rounded to whole nodes)
    jobs = load(write(tmp_path, "a,0,60,16\nb,3600,60,1\n", name="big.csv"))
    assert default_capacity(jobs) == 16
    assert node_sizes(20) == [8, 8, 4]
    check_fits(jobs, 16)
    with pytest.raises(ValueError, match="16 GPUs"):
        check_fits(jobs, 12)


def test_shipped_sample():
    jobs = load(SAMPLE_TRACE)
    assert len(jobs) == 400
    assert default_capacity(jobs) == 16
    assert (SAMPLE_TRACE.parent / "LICENSE").read_text().lstrip().startswith("MIT License")


# --- the replay, schedules computed by hand --------------------------------------

def test_fifo_blocks_behind_the_head_and_skip_does_not(tmp_path):
    # 8 GPUs. A (4 GPUs, 10 s) at 0; B (8 GPUs, 10 s) at 1 waits for A; C (1 GPU, 5 s) at 2.
    p = write(tmp_path, "A,0,10,4\nB,1,10,8\nC,2,5,1\n")
    jobs = load(p, n_teams=1)
    fifo = run(jobs, 8, "fifo")
    # Strict FIFO: C waits behind B although 4 GPUs are free: A 0-10, B 10-20, C 20-25.
    assert jcts(fifo) == {"A": 10, "B": 19, "C": 23}
    m = summarize(fifo)
    assert m["makespan_s"] == 25
    assert m["queue_avg_s"] == pytest.approx((0 + 9 + 18) / 3)
    assert m["gpu_utilisation"] == pytest.approx((4 * 10 + 8 * 10 + 1 * 5) / (8 * 25))
    assert m["jct_median_s"] == 19
    # Skip-ahead: C starts at 2 in the free GPUs and B is not delayed (C ends at 7 < 10).
    assert jcts(run(jobs, 8, "fifo-skip")) == {"A": 10, "B": 19, "C": 5}


def test_reserve_backfill_protects_the_head(tmp_path):
    # Like above but C runs 20 s: skipping ahead delays B; EASY backfill (default policy) does not.
    jobs = load(write(tmp_path, "A,0,10,4\nB,1,10,8\nC,2,20,1\n"), n_teams=1)
    assert jcts(run(jobs, 8, "fifo-skip")) == {"A": 10, "B": 31, "C": 20}    # C 2-22, B 22-32
    assert jcts(run(jobs, 8, "default", n_teams=1)) == {"A": 10, "B": 19, "C": 38}   # B 10-20, C 20-40
    # A short C declares a limit that ends before B's reservation (t=10): it backfills.
    jobs = load(write(tmp_path, "A,0,10,4\nB,1,10,8\nC,2,5,1\n", name="short.csv"), n_teams=1)
    assert jcts(run(jobs, 8, "default", n_teams=1)) == {"A": 10, "B": 19, "C": 5}


def test_sjf_orders_by_declared_limit(tmp_path):
    # 8 GPUs held by A until 10; then B (8 GPUs, 100 s) and C (8 GPUs, 10 s) both wait: SJF runs C first.
    jobs = load(write(tmp_path, "A,0,10,8\nB,1,100,8\nC,2,10,8\n"), n_teams=1)
    assert jcts(run(jobs, 8, "sjf")) == {"A": 10, "B": 119, "C": 18}
    assert jcts(run(jobs, 8, "fifo")) == {"A": 10, "B": 109, "C": 118}


def test_gang_needs_whole_nodes(tmp_path):
    # 16 GPUs = two nodes. G (16 GPUs = 2 × 8) waits until both nodes are empty.
    jobs = load(write(tmp_path, "S,0,30,1\nG,1,10,16\n"), n_teams=1)
    assert jcts(run(jobs, 16, "fifo")) == {"S": 30, "G": 39}


def test_reclaim_preempts_a_borrower_which_keeps_its_progress(tmp_path):
    # Two teams, 4 GPUs guaranteed each. X (team-0) borrows all 8 GPUs for 10,000 s.
    # Y (team-1, 4 GPUs, 500 s) arrives at 100; training may be preempted after 600 s of
    # running, so at 600 the replay wakes up and Y reclaims its guarantee.
    # X resumes at 1,100 (when Y is done) with 10,000 − 600 s left: it ends at 10,500.
    jobs = load(write(tmp_path, "00000000-x,0,10000,8\n00000001-y,100,500,4\n"), n_teams=2)
    assert [j.team for j in jobs] == ["team-0", "team-1"]
    out = run(jobs, 8, "default", n_teams=2)
    assert jcts(out) == {"00000000-x": 10500, "00000001-y": 1000}
    assert out.preemptions == 1
    assert [r.preemptions for r in out.records] == [1, 0]
    m = summarize(out)
    assert m["preemptions"] == 1 and m["preempted_jobs"] == 1 and m["max_preemptions"] == 1
    assert m["gpu_utilisation"] == pytest.approx((8 * 10000 + 4 * 500) / (8 * 10500))
    # FIFO never preempts: Y waits for X.
    assert jcts(run(jobs, 8, "fifo", n_teams=2)) == {"00000000-x": 10000, "00000001-y": 10400}


def test_churn_counts_jobs_preempted_and_the_most_one_job_was(tmp_path):
    # As above, and Z (team-1) arrives at 1,200 while X runs again: X may be preempted once it
    # has run 600 s more (1,700), so it is stopped twice; Y and Z never.
    jobs = load(write(tmp_path, "00000000-x,0,10000,8\n00000001-y,100,500,4\n00000003-z,1200,500,4\n"),
                n_teams=2)
    out = run(jobs, 8, "default", n_teams=2)
    m = summarize(out)
    assert [r.preemptions for r in out.records] == [2, 0, 0]
    assert (m["preemptions"], m["preempted_jobs"], m["max_preemptions"]) == (2, 1, 2)
    assert jcts(out)["00000000-x"] == 11000      # 10,000 s of work + 2 × 500 s waiting


def test_replay_drives_the_scheduler_facade(tmp_path):
    jobs = load(write(tmp_path, "A,0,10,4\nB,1,10,8\n"), n_teams=1)
    seen = []

    def after_cycle(sched, now, res, workload_to_job):
        seen.append((type(sched), now, [workload_to_job[w.id] for w in res.admitted]))

    run(jobs, 8, "default", n_teams=1, after_cycle=after_cycle)
    assert all(t is Scheduler for t, _, _ in seen)
    assert [(now, adm) for _, now, adm in seen if adm] == [(0, [0]), (10, [1])]


def test_bad_arguments(tmp_path):
    jobs = load(write(tmp_path, "A,0,10,4\n"))
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(jobs, 8, "nope")
    with pytest.raises(ValueError, match="declared_limits"):
        simulate(jobs, 8, "fifo", declared_limits="maybe")
    with pytest.raises(ValueError, match="never hold"):
        simulate(jobs, 2, "fifo")


# --- the shipped sample ---------------------------------------------------------

@pytest.fixture(scope="module")
def sample():
    return load(SAMPLE_TRACE)


@pytest.fixture(scope="module")
def sample_results(sample):
    return {p: run(sample, 16, p) for p in POLICIES}


def test_every_job_finishes_under_every_policy(sample, sample_results):
    for policy, out in sample_results.items():
        assert all(r.finish is not None and r.first_admit is not None for r in out.records), policy
        assert all(r.finish >= r.job.submit + r.job.duration - 1e-6 for r in out.records), policy
        # Checkpointed preemption loses no work: busy GPU-seconds are exactly the trace's.
        busy = sum(r.busy_gpu_seconds for r in out.records)
        assert busy == pytest.approx(sum(j.gpus * j.duration for j in sample)), policy
        m = summarize(out)
        assert m["jobs"] == len(sample) and 0 < m["gpu_utilisation"] <= 1


def test_replay_is_deterministic(sample, sample_results):
    again = summarize(run(sample, 16, "default"))
    first = summarize(sample_results["default"])
    for k in ("wall_seconds", "cycle_seconds"):
        first.pop(k), again.pop(k)
    assert again == first


def test_default_policy_beats_fifo_on_the_sample(sample_results):
    fifo = summarize(sample_results["fifo"])
    dflt = summarize(sample_results["default"])
    assert fifo["jct_avg_s"] / dflt["jct_avg_s"] > 1.2
    assert dflt["preemptions"] > 0 and fifo["preemptions"] == 0


def test_no_declared_limits_still_finishes(sample):
    m = simulate(sample[:150], 16, "default", declared_limits="none")
    assert m["jobs"] == 150 and m["declared_limits"] == "none"


# --- metrics ----------------------------------------------------------------------

def test_jain_index():
    assert jain([2.0, 2.0, 2.0, 2.0]) == 1.0
    assert jain([1.0, 0.0, 0.0, 0.0]) == 0.25
    assert jain([1.0, 2.0]) == pytest.approx(9 / 10)
    assert jain([0.0, 0.0]) == 1.0
    assert math.isnan(jain([]))


def test_percentile_interpolates_linearly():
    xs = list(range(1, 101))
    assert percentile(xs, 99) == pytest.approx(99.01)
    assert percentile(xs, 50) == pytest.approx(50.5)
    assert percentile(xs, 100) == 100 and percentile(xs, 0) == 1
    assert percentile([7.0], 99) == 7.0
    assert percentile([10, 0], 25) == 2.5
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(xs, 101)


def test_fairness_uses_team_mean_slowdown(tmp_path):
    # team-0: one job that waits as long as it runs (slowdown 2); team-1: no wait (slowdown 1).
    jobs = load(write(tmp_path, "00000000-a,0,10,8\n00000002-b,0,10,8\n00000001-c,30,10,8\n"), n_teams=2)
    m = simulate(jobs, 8, "fifo", n_teams=2)
    assert m["team_slowdown"] == {"team-0": pytest.approx((1 + 2) / 2), "team-1": 1.0}
    assert m["jain_fairness"] == pytest.approx(jain([1.5, 1.0]))


def test_a_swap_in_replay_waits_for_its_victims_checkpoint(tmp_path):
    # Eight 100-hour jobs fill the 8 GPUs at 0; a 1-hour job arrives at 1,000 s and may swap one
    # out (its team's own, 8× longer). The jobs checkpoint every 30 minutes (the cost model),
    # and the replay declares that on their class: the swap waits until a victim has just
    # saved — the engine assumes a minute of loading, so at 1,860 s — and the replay wakes up
    # then although nothing else happens. The victim loses 60 s of work instead of 1,000 s.
    rows = "".join(f"L{i},0,360000,1\n" for i in range(8)) + "S,1000,3600,1\n"
    jobs = load(write(tmp_path, rows), n_teams=1)
    out = run(jobs, 8, "default", n_teams=1, declared_limits="oracle", restart=Restart(60, 1800))
    assert jcts(out)["S"] == 1860 + 3600 - 1000
    (victim,) = [r for r in out.records if r.preemptions]
    assert victim.lost_gpu_seconds == 60 + 60          # work since the checkpoint + the restart
    m = summarize(out)    # useful utilisation: the jobs' own GPU-seconds, what was lost left out
    assert m["gpu_useful_utilisation"] == pytest.approx((8 * 360000 + 3600) / (8 * m["makespan_s"]))
    assert m["gpu_utilisation"] == pytest.approx(m["gpu_useful_utilisation"] + 120 / (8 * m["makespan_s"]))
    # With no checkpoints (free restarts), nothing to wait for: the swap comes at 1,000 s; nor
    # when the engine is told to swap whatever is lost (the setting as trace replay overrides it).
    assert jcts(run(jobs, 8, "default", n_teams=1, declared_limits="oracle"))["S"] == 3600
    assert jcts(run(jobs, 8, "default", n_teams=1, declared_limits="oracle", restart=Restart(60, 1800),
                    engine={"swap_loss": math.inf}))["S"] == 3600
