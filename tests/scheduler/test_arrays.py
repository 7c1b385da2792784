"""Job arrays (scheduler/arrays.py): the index syntax, the tasks one submission makes, and the
cap on how many run at a time, through cycles, preemption, a restart and the store."""

import pytest

from scheduler import Scheduler
from scheduler.arrays import MAX_TASKS, env, parse
from scheduler.blockers import ARRAY_LIMIT
from scheduler.errors import NotFound, TooManyWaiting, ValidationError
from scheduler.model import ADMITTED, AWAITING_APPROVAL, CANCELLED, HELD, PENDING
from scheduler.store.sql import SqlStore

from sched_helpers import cluster, job


@pytest.mark.parametrize("text, indexes, limit", [
    ("0-3", [0, 1, 2, 3], 0),
    ("7", [7], 0),
    ("1,3,5-11:2", [1, 3, 5, 7, 9, 11], 0),
    (" 0-9%2 ", list(range(10)), 2),
    ("4,2,2,0-1", [0, 1, 2, 4], 0),          # sorted, each index once
    (f"0-{MAX_TASKS - 1}%{MAX_TASKS}", list(range(MAX_TASKS)), MAX_TASKS),
])
def test_indexes_are_read_as_slurm_writes_them(text, indexes, limit):
    assert parse(text) == (indexes, limit)


@pytest.mark.parametrize("text, message", [
    ("", "array must be task indexes like 0-9"),
    (3, "array must be task indexes"),
    ("a-b", "'a-b' is not an index or a range"),
    ("0-9%0", "the number after % is how many tasks may run at a time, 1 to 1000; got '0'"),
    ("0-9%x", "got 'x'"),
    ("9-0", "the range must go up"),
    ("0-9:0", "the range must go up"),
    ("0-1000000", "not an index or a range"),
    ("0-1000", "more than 1000 tasks; split the work"),
    ("1,-2", "'-2' is not an index"),
])
def test_a_malformed_array_is_refused_saying_how_to_write_it(text, message):
    with pytest.raises(ValidationError, match=message):
        parse(text)


def test_one_submission_makes_one_task_per_index_with_ids_in_a_row():
    s = cluster(nodes=1, gpus=8)
    before = job(s, gpus=1, now=0)
    tasks = job(s, gpus=1, now=1, array="2,4,6", name="sweep", time_limit=60)
    after = job(s, gpus=1, now=2)
    first = before.seq + 1
    assert [t.id for t in tasks] == [f"w{first + i:07d}" for i in range(3)]
    assert [t.array for t in tasks] == [{"id": tasks[0].id, "index": i, "size": 3, "limit": 0} for i in (2, 4, 6)]
    assert {(t.name, t.time_limit, t.state, t.request["gpu"]) for t in tasks} == {("sweep", 60, PENDING, 1)}
    assert (after.seq, after.array) == (first + 3, None)
    assert tasks[0].metadata is not tasks[1].metadata        # each task's record is its own
    assert env(tasks[1].array) == {"COMPUTEHUB_ARRAY_ID": tasks[0].id, "COMPUTEHUB_ARRAY_TASK_ID": "4",
                                   "COMPUTEHUB_ARRAY_TASK_COUNT": "3"}
    submitted = [e.data.get("array") for e in s.events()
                 if e.kind == "submitted" and e.workload_id in (tasks[1].id, after.id)]
    assert submitted == [tasks[1].array, None]
    s.cycle(now=3)
    assert all(s.get(t.id).state == ADMITTED for t in tasks)     # no cap: all at once


def test_the_cap_lets_n_tasks_hold_gpus_at_a_time_in_index_order():
    s = cluster(nodes=2, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-4%2")
    other = job(s, gpus=1, now=1)                                 # after the array in line
    s.cycle(now=2)
    assert [s.get(t.id).state for t in tasks] == [ADMITTED, ADMITTED, PENDING, PENDING, PENDING]
    assert s.get(other.id).state == ADMITTED                      # a capped task holds nothing back
    assert s.last.blockers[tasks[2].id].code == ARRAY_LIMIT
    assert s.explain(tasks[3].id, now=3)["reason"] == (f"array {tasks[0].id} runs at most 2 tasks at a time and 2 are "
                                                       "running; it starts when one of them ends")
    s.mark_running(tasks[0].id, now=3)
    s.cycle(now=4)
    assert s.get(tasks[2].id).state == PENDING                    # running counts as well as admitted
    s.mark_finished(tasks[0].id, now=5)
    s.cycle(now=6)
    assert [s.get(t.id).state for t in tasks[1:]] == [ADMITTED, ADMITTED, PENDING, PENDING]
    s.cancel(tasks[1].id, now=7)
    s.mark_finished(tasks[2].id, now=7, exit_code=1)       # a failed task frees its place too
    s.cycle(now=8)
    assert [s.get(t.id).state for t in tasks[3:]] == [ADMITTED, ADMITTED]


def test_a_capped_task_neither_preempts_nor_reserves():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}}, {"name": "b"}])
    borrower = job(s, "b", user="bob", gpus=4, kind="batch", now=0)
    tasks = job(s, gpus=4, now=1, array="0-2%1")
    s.cycle(now=2)
    # The first task fits beside the borrower; the others wait for it, not for the borrower's GPUs.
    assert [s.get(t.id).state for t in tasks] == [ADMITTED, PENDING, PENDING]
    assert s.get(borrower.id).state == ADMITTED
    assert s.last.reservations == []
    s.mark_finished(tasks[0].id, now=3)
    s.cycle(now=4)
    assert [s.get(t.id).state for t in tasks[1:]] == [ADMITTED, PENDING]


def test_tasks_are_held_approved_and_counted_like_work_submitted_alone():
    s = cluster(nodes=1, gpus=8, queues=[{"name": "a", "guaranteed": {"gpu": 8}, "approval_above": {"gpu": 2}}])
    held = job(s, gpus=1, now=0, array="0-1", hold=True)
    assert [t.state for t in held] == [HELD, HELD]
    asked = job(s, gpus=4, now=1, array="0-1")
    assert [t.state for t in asked] == [AWAITING_APPROVAL] * 2
    s.max_waiting_per_user = 5
    with pytest.raises(TooManyWaiting, match=r"already has 2 workloads waiting in line \(pending\); this "
                                             r"array's 4 tasks would make 6, more than the 5"):
        job(s, gpus=1, now=2, array="0-3")
    assert len(s.workloads()) == 4                                 # nothing of the refused array
    with pytest.raises(ValidationError, match="only batch and training work comes in arrays, not notebook"):
        job(s, kind="notebook", now=3, array="0-1")
    with pytest.raises(ValidationError, match="not inference"):
        job(s, kind="inference", now=3, array="0-1")
    assert len(job(s, gpus=1, now=4, array="0-2")) == 3            # 2 + 3 = 5: at the cap, accepted


def test_a_batch_refuses_an_array_alone_and_accepts_the_rest():
    s = cluster(nodes=1, gpus=8)
    out = s.submit_many([{"user": "ada", "queue": "a", "resources": {"gpu": 1}, "array": "0-1"},
                         {"user": "ada", "queue": "a", "resources": {"gpu": 1}, "array": "0-x"},
                         {"user": "ada", "queue": "a", "resources": {"gpu": 1}}], now=0)
    assert [t.seq for t in out[0]] == [out[0][0].seq, out[0][0].seq + 1]
    assert isinstance(out[1], ValidationError) and out[2].seq == out[0][0].seq + 2


def test_the_cap_holds_across_a_restart(store_url):
    s = Scheduler(store=SqlStore(store_url))
    s.put_node({"name": "n0", "gpus": 8, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}}, now=0)
    tasks = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "array": "0-3%2"}, now=0)
    s.cycle(now=1)
    s2 = Scheduler(store=SqlStore(store_url))
    assert [s2.get(t.id).array for t in tasks] == [t.array for t in tasks]
    s2.cycle(now=2)
    assert [s2.get(t.id).state for t in tasks] == [ADMITTED, ADMITTED, PENDING, PENDING]
    s2.mark_finished(tasks[1].id, now=3)
    s2.cycle(now=4)
    assert [s2.get(t.id).state for t in tasks[2:]] == [ADMITTED, PENDING]


def test_work_after_a_whole_array_waits_for_every_task():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-4")
    report = job(s, gpus=1, now=1, after=[f"{tasks[0].id}[]"])
    assert report.after == [f"{t.id}:ok" for t in tasks]                  # the array's tasks, by id
    s.cycle(now=2)
    reason = s.explain(report.id, now=2)["reason"]
    assert reason == (f"runs after {tasks[0].id} finishes (it is admitted) and {tasks[1].id} finishes (it is "
                      f"admitted) and {tasks[2].id} finishes (it is admitted) and 2 more")
    for i, t in enumerate(tasks[:-1]):
        s.mark_finished(t.id, now=3 + i)
    s.cycle(now=10)
    assert s.get(report.id).state == HELD                                  # the last task still runs
    s.mark_finished(tasks[-1].id, now=11)
    s.cycle(now=12)
    assert s.get(report.id).state == ADMITTED
    released = [e for e in s.events(workload_id=report.id) if e.kind == "released"]
    assert released[0].reason.startswith(f"all 5 ended as asked ({tasks[0].id} finished; ")


def test_a_failed_task_cancels_what_was_to_run_after_its_array_finished():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-2")
    ok = job(s, gpus=1, now=1, after=[f"w{tasks[0].seq}[]"])                # w + digits, as parse writes it
    anyway = job(s, gpus=1, now=1, after=[f"{tasks[0].id}[]:any"])
    s.cycle(now=2)
    s.mark_finished(tasks[1].id, now=3, exit_code=1)
    s.cycle(now=4)
    assert (s.get(ok.id).state, s.get(ok.id).reason) == (
        CANCELLED, f"{tasks[1].id} failed: exit code 1, and this was to run after it finishes")
    assert s.get(anyway.id).state == HELD
    with pytest.raises(ValidationError, match=f"no job array {tasks[1].id} of ada's"):
        job(s, gpus=1, now=5, after=[f"{tasks[1].id}[]"])                   # a task, not the array's first
    with pytest.raises(ValidationError, match=f"no job array {tasks[0].id} of bob's"):
        job(s, user="bob", gpus=1, now=5, after=[f"{tasks[0].id}[]"])
    with pytest.raises(ValidationError, match=f"names {tasks[0].id} twice, with :ok and :any"):
        job(s, gpus=1, now=5, after=[f"{tasks[0].id}[]", f"{tasks[0].id}:any"])


def test_the_cap_changes_while_the_array_runs():
    s = cluster(nodes=1, gpus=8)
    tasks = job(s, gpus=1, now=0, array="0-5%1")
    s.cycle(now=1)
    assert [s.get(t.id).state for t in tasks].count(ADMITTED) == 1
    assert len(s.set_array_limit(tasks[0].id, 3, now=2, actor="ada")) == 6
    s.cycle(now=3)
    assert [s.get(t.id).state for t in tasks] == [ADMITTED] * 3 + [PENDING] * 3
    s.set_array_limit(tasks[0].id, 1, now=4)           # lowered: the three go on, no fourth starts
    s.mark_finished(tasks[0].id, now=5)
    s.cycle(now=6)
    assert [s.get(t.id).state for t in tasks[1:]] == [ADMITTED] * 2 + [PENDING] * 3
    s.set_array_limit(tasks[0].id, 0, now=7)           # 0: no cap
    s.cycle(now=8)
    assert all(s.get(t.id).state == ADMITTED for t in tasks[1:])
    changed = [(e.reason, e.data["limit"], e.data["actor"]) for e in s.events() if e.kind == "array_limit"]
    assert changed == [("at most 3 at a time", 3, "ada"), ("at most 1 at a time", 1, ""), ("no limit", 0, "")]
    for t in tasks[1:]:
        s.mark_finished(t.id, now=9)
    with pytest.raises(NotFound, match=f"no job array '{tasks[0].id}' with tasks waiting or running"):
        s.set_array_limit(tasks[0].id, 2, now=10)
    for bad in (-1, 1001, 2.5, True, "3"):
        with pytest.raises(ValidationError, match="limit must be a whole number of tasks from 0"):
            s.set_array_limit(tasks[0].id, bad, now=10)


def test_corr_pairs_two_arrays_task_by_task():
    s = cluster(nodes=1, gpus=8)
    prep = job(s, gpus=1, now=0, array="0-2")
    train = job(s, gpus=1, now=1, array="0-2", after=[f"{prep[0].id}[]:corr"])
    assert [t.after for t in train] == [[f"{p.id}:ok"] for p in prep]          # task i after task i
    assert [t.state for t in train] == [HELD] * 3
    assert s.explain(train[1].id, now=1)["reason"] == f"runs after {prep[1].id} finishes (it is pending)"
    s.cycle(now=2)
    s.mark_finished(prep[1].id, now=3)
    s.mark_finished(prep[2].id, now=3, exit_code=1)
    s.cycle(now=4)
    assert [s.get(t.id).state for t in train] == [HELD, ADMITTED, CANCELLED]  # each as its own pair ended
    with pytest.raises(ValidationError, match=f"array {prep[0].id} has no task 3, which task 3 of this one"):
        job(s, gpus=1, now=5, array="1-3", after=[f"{prep[0].id}[]:corr"])
    with pytest.raises(ValidationError, match=f"{prep[2].id} failed: exit code 1; work to run after it finishes"):
        job(s, gpus=1, now=5, array="2", after=[f"{prep[0].id}[]:corr"])  # its pair failed: never
    with pytest.raises(ValidationError, match="pairs the tasks of two job arrays by index: submit an array"):
        job(s, gpus=1, now=5, after=[f"{prep[0].id}[]:corr"])
    with pytest.raises(ValidationError, match="name the other array as"):
        job(s, gpus=1, now=5, array="0-1", after=[f"{prep[0].id}:corr"])
    assert s.store.count_workloads() == 6                                   # nothing of the refused


def test_usage_by_array_counts_each_arrays_tasks(store_url):
    s = Scheduler(store=SqlStore(store_url))
    s.put_node({"name": "n0", "gpus": 8, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}}, now=0)
    sweep = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 2}, "array": "0-2"}, now=0)
    alone = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}}, now=0)
    s.cycle(now=0)
    for t in sweep:
        s.mark_finished(t.id, now=3600)                  # 3 tasks × 2 GPUs × 1 h
    s.mark_finished(alone.id, now=1800)
    rows = s.usage(0, 7200, by="array")
    assert [(r["array"], r["user"], r["queue"], r["gpu_hours"]) for r in rows] == [(sweep[0].id, "ada", "a", 6.0)]
    assert {r["workload"] for r in s.usage(0, 7200, by="workload")} == {t.id for t in sweep} | {alone.id}
