"""Preemption and checkpoints through the launcher, end to end (tests/spawner/launcherhub.py:
a real hub + proxy + ComputeHub service, the launcher as the hub's managed service, jobs as
real local processes, the GPUs emulated). Shown: a preempted job gets SIGTERM, saves to
$COMPUTEHUB_CHECKPOINT_DIR (the service learns it saves on stop), is requeued and resumes
from it; a job that saves elsewhere reports its save on stop itself (`save_on_preemption`),
and `computehub queue` then says it saves when stopped; the checkpoints a job saves reach the
service, through the launcher or with the job's own report token; a teammate's short job
preempts a long one of the same class (preempt_for_shorter).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcherhub import get, py, running_launcher_hub, state_is, submit, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def lhub(tmp_path_factory):
    with running_launcher_hub(tmp_path_factory.mktemp("lhub")) as hw:
        yield hw


def preempted_once(hub, work, code: str, before=lambda victim: True, again=None):
    """bob's 2-GPU batch job running ``code`` is preempted by alice's 2-GPU training job,
    requeued and run again to its end: (the workload then, its log lines). ``before(victim)``
    must hold while it first runs; ``again(victim)`` is called once it runs again."""
    victim = submit(hub, "bob", py(code), work, kind="batch", gpus=2)
    wait_for("the batch job to run", lambda: state_is(hub, victim["id"], "running"))
    time.sleep(1.0)
    assert before(victim), get(hub, victim["id"])
    urgent = submit(hub, "alice", py("print('urgent done')"), work, gpus=2)
    wait_for("the urgent job to finish", lambda: state_is(hub, urgent["id"], "finished"), 90)
    if again is not None:
        again(wait_for("the victim to run again", lambda: (w := state_is(hub, victim["id"], "running"))
                       and w["preemptions"] >= 1 and w, 90))
    w = wait_for("the victim to run again and finish", lambda: state_is(hub, victim["id"], "finished"), 90)
    return w, hub.call("GET", f"/workloads/{victim['id']}/logs", hub.tokens["bob"]).json()["lines"]


def cli_lines(hub, user: str, *args: str) -> list[str]:
    """`computehub ARGS...` as ``user``, through the hub and proxy: what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPUTEHUB_", "JUPYTERHUB_"))}
    env.update(COMPUTEHUB_URL=hub.service_url, JUPYTERHUB_API_TOKEN=hub.tokens[user])
    r = subprocess.run([sys.executable, "-m", "hub_ext", *args], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout.splitlines()


def queue_rows(hub, user: str) -> list[str]:
    """`computehub queue` as ``user``: its table's lines."""
    return cli_lines(hub, user, "queue")


def test_preemption_sigterm_checkpoint_requeue_resume(lhub):
    """A batch job (preemptible at once) holding both GPUs is preempted by a training job:
    SIGTERM, it saves a checkpoint, the launcher reports it stopped, it is requeued, and when it
    runs again it finds its checkpoint (same $COMPUTEHUB_CHECKPOINT_DIR)."""
    hub, work = lhub
    code = ("import os, signal, sys, time\n"
            "ck = os.path.join(os.environ['COMPUTEHUB_CHECKPOINT_DIR'], 'step')\n"
            "step = int(open(ck).read()) if os.path.exists(ck) else 0\n"
            "print('resumed from', step, flush=True)\n"
            "def term(*_):\n"
            "    open(ck, 'w').write(str(step)); print('checkpointed', step, flush=True); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "if step: sys.exit(0)\n"
            "while True:\n"
            "    step += 1; time.sleep(0.05)\n")
    w, lines = preempted_once(hub, work, code)
    assert w["preemptions"] >= 1, w
    saved = [int(x.split()[1]) for x in lines if x.startswith("checkpointed ")]
    resumed = [int(x.split()[2]) for x in lines if x.startswith("resumed from ")]
    assert saved and saved[0] > 0, lines
    assert resumed[:2] == [0, saved[0]], lines
    # The launcher saw the save it made when told to stop: a preemption now loses only its restart.
    assert w["saves_on_stop"] is True and w["checkpointed_at"] is not None, w


def test_a_job_that_saves_on_preemption_tells_the_scheduler_itself(lhub):
    """``save_on_preemption(save)``: on SIGTERM the job saves where the launcher does not look
    (here its working folder) and reports the save itself, so the service learns that it saves
    on stop (its later preemptions lose only the restart) without the launcher seeing a file."""
    hub, work = lhub
    code = ("import os, sys, time\n"
            "from hub_ext.client import save_on_preemption\n"
            "mark = os.path.join(os.getcwd(), 'saved-' + os.environ['COMPUTEHUB_WORKLOAD_ID'])\n"
            "if os.path.exists(mark):\n"
            "    print('resumed', flush=True)\n"
            "    while not os.path.exists(mark + '.done'): time.sleep(0.05)\n"
            "    sys.exit(0)\n"
            "print('checkpoint folder', os.environ['COMPUTEHUB_CHECKPOINT_DIR'], flush=True)\n"
            "def save():\n"
            "    open(mark, 'w').write('state'); print('saved on stop', flush=True)\n"
            "save_on_preemption(save)\n"
            "while True:\n"
            "    time.sleep(0.05)\n")
    def again(victim):
        """Running again: `computehub queue` tells its owner that it saves when stopped."""
        try:
            row = next(x for x in queue_rows(hub, "bob") if x.startswith(victim["id"]))
            assert "running" in row and row.endswith("saves when stopped"), row
        finally:
            (work / f"saved-{victim['id']}.done").write_text("")

    w, lines = preempted_once(hub, work, code,
                              before=lambda v: get(hub, v["id"])["saves_on_stop"] is False, again=again)
    assert "saved on stop" in lines and "resumed" in lines, lines
    assert w["preemptions"] >= 1 and w["saves_on_stop"] is True, w
    folder = next(x for x in lines if x.startswith("checkpoint folder ")).split(" ", 2)[2]
    assert os.path.isdir(folder) and not os.listdir(folder)          # nothing the launcher could have seen


def test_the_checkpoints_a_job_saves_reach_the_service(lhub):
    """A job saves into $COMPUTEHUB_CHECKPOINT_DIR (write, then rename); the launcher sees each
    new file and reports it, so the service knows when the job last saved (what a preemption
    would lose). A job that saves nothing has no checkpoint time."""
    hub, work = lhub
    code = ("import os, time\n"
            "d = os.environ['COMPUTEHUB_CHECKPOINT_DIR']\n"
            "for i in range(3):\n"
            "    time.sleep(1.5)\n"
            "    open(os.path.join(d, 'last.pt.tmp'), 'w').write(str(i))\n"
            "    os.replace(os.path.join(d, 'last.pt.tmp'), os.path.join(d, 'last.pt'))\n"
            "    print('saved', os.stat(os.path.join(d, 'last.pt')).st_mtime, flush=True)\n"
            "time.sleep(60)\n")
    saver = submit(hub, "bob", py(code), work, kind="batch")
    quiet = submit(hub, "bob", py("import time; time.sleep(60)"), work, kind="batch")
    try:
        first = wait_for("a first checkpoint", lambda: get(hub, saver["id"])["checkpointed_at"], 30)
        w = get(hub, saver["id"])
        assert w["state"] == "running" and first >= w["started_at"], w
        last = wait_for("the third checkpoint", lambda: len(
            [x for x in hub.call("GET", f"/workloads/{saver['id']}/logs", hub.tokens["bob"]).json()["lines"]
             if x.startswith("saved ")]) == 3 and get(hub, saver["id"])["checkpointed_at"] > first
            and get(hub, saver["id"]), 30)
        lines = hub.call("GET", f"/workloads/{saver['id']}/logs", hub.tokens["bob"]).json()["lines"]
        saves = [float(x.split()[1]) for x in lines if x.startswith("saved ")]
        wait_for("the last save reported", lambda: get(hub, saver["id"])["checkpointed_at"] == saves[-1], 10)
        assert first in saves and last["checkpointed_at"] in saves, (first, last, saves)
        q = get(hub, quiet["id"])
        assert q["state"] == "running" and q["checkpointed_at"] is None, q
    finally:
        for w in (saver, quiet):
            hub.call("DELETE", f"/workloads/{w['id']}", hub.tokens["bob"])


def test_a_job_reports_its_own_checkpoints_with_its_report_token(lhub):
    """A job that saves where the launcher cannot look (object storage, another disk) reports
    each save itself: `computehub checkpoint`, or `report_checkpoint()` in Python, with the
    $COMPUTEHUB_URL and $COMPUTEHUB_REPORT_TOKEN the launcher gave it; it holds no hub token."""
    hub, work = lhub
    code = ("import os, subprocess, sys, time\n"
            "print('hub token', any(k in os.environ for k in ('COMPUTEHUB_TOKEN', 'JUPYTERHUB_API_TOKEN')),"
            " flush=True)\n"
            "time.sleep(1)\n"
            "out = subprocess.run([sys.executable, '-m', 'hub_ext', 'checkpoint'], capture_output=True, text=True)\n"
            "print('cli', out.returncode, out.stdout.strip(), out.stderr.strip(), flush=True)\n"
            "time.sleep(1.5)\n"
            "from hub_ext.client import report_checkpoint\n"
            "print('again', report_checkpoint()['checkpointed_at'], flush=True)\n"
            "time.sleep(60)\n")
    job = submit(hub, "bob", py(code), work, kind="batch")
    try:
        def lines():
            return hub.call("GET", f"/workloads/{job['id']}/logs", hub.tokens["bob"]).json().get("lines", [])
        wait_for("both reports", lambda: any(x.startswith("again ") for x in lines()), 30)
        out = {x.split()[0]: x for x in lines() if x.split()[:1] in (["hub"], ["cli"], ["again"])}
        assert out["hub"] == "hub token False", out
        assert out["cli"].startswith(f"cli 0 {job['id']}  running  checkpoint saved"), out
        w = get(hub, job["id"])
        assert w["checkpointed_at"] == float(out["again"].split()[1]), (w, out)
        assert 1 <= w["checkpoint_seen_every"] <= 10, w        # two reports of one run: its cadence
    finally:
        hub.call("DELETE", f"/workloads/{job['id']}", hub.tokens["bob"])


def test_short_work_preempts_longer_work_of_the_same_team_and_class(lhub):
    """preempt_for_shorter through the real service and launcher: a batch job declaring a day
    holds both GPUs of team vision; a teammate's batch job declaring a minute preempts it (same
    queue, same class: only the rule for shorter work allows it), runs, and the long job resumes
    from its checkpoint."""
    hub, work = lhub
    code = ("import os, signal, sys, time\n"
            "ck = os.path.join(os.environ['COMPUTEHUB_CHECKPOINT_DIR'], 'step')\n"
            "step = int(open(ck).read()) if os.path.exists(ck) else 0\n"
            "def term(*_):\n"
            "    open(ck, 'w').write(str(step)); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "if step: print('resumed', flush=True); sys.exit(0)\n"
            "while True:\n"
            "    step += 1; time.sleep(0.05)\n")
    long_ = submit(hub, "bob", py(code), work, kind="batch", gpus=2, time_limit=86400)
    wait_for("the long job to run", lambda: state_is(hub, long_["id"], "running"))
    short = submit(hub, "alice", py("print('short done')"), work, kind="batch", gpus=2, time_limit=60)
    wait_for("the short job to finish", lambda: state_is(hub, short["id"], "finished"), 90)
    w = wait_for("the long job to resume and finish", lambda: state_is(hub, long_["id"], "finished"), 90)
    assert w["preemptions"] >= 1 and w["metadata"].get("preempted_by") == short["id"], w
    lines = hub.call("GET", f"/workloads/{long_['id']}/logs", hub.tokens["bob"]).json()["lines"]
    assert "resumed" in lines, lines


def test_a_cancelled_job_keeps_its_gpus_until_its_processes_have_exited(lhub):
    """Cancelling a running job is SIGTERM and the launcher's cancel_grace: the job that waits
    for its GPUs starts only once its processes have exited (they take 2 s to), not while they
    may still use the GPUs. Each job writes when it started and ended (UNIX times)."""
    hub, work = lhub
    stamp = work / "cancel-stamps"
    stamp.mkdir()
    slow = ("import signal, sys, time\n"
            f"open({str(stamp / 'slow-start')!r}, 'w').write(str(time.time()))\n"
            "def term(*_):\n"
            f"    time.sleep(2); open({str(stamp / 'slow-end')!r}, 'w').write(str(time.time())); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "while True:\n"
            "    time.sleep(0.05)\n")
    first = submit(hub, "alice", py(slow), work, gpus=2)
    wait_for("the first job to run", lambda: state_is(hub, first["id"], "running") and (stamp / "slow-start").exists())
    nxt = submit(hub, "alice", py(f"import time; open({str(stamp / 'next-start')!r}, 'w').write(str(time.time()))"),
                 work, gpus=2)
    assert cli_lines(hub, "alice", "cancel", first["id"]) == [
        f"{first['id']}  cancelling  (it is being stopped; its GPUs return once it has)"]
    done = wait_for("the first job cancelled", lambda: state_is(hub, first["id"], "cancelled"), 30)
    assert done["reason"] == "cancelled by alice; stopped", done
    wait_for("the next job to finish", lambda: state_is(hub, nxt["id"], "finished"), 60)
    ended, started = float((stamp / "slow-end").read_text()), float((stamp / "next-start").read_text())
    assert started > ended, (started, ended)
    assert get(hub, nxt["id"])["admitted_at"] >= done["ended_at"]
