"""The magics in a REAL IPython kernel (ipykernel, driven by jupyter_client) against a real
JupyterHub + configurable-http-proxy + ComputeHub service, with the launcher run by the hub
(``configure_jupyterhub(..., launcher=True)``) starting jobs as real local processes.

Emulated: the GPUs (a simulated node "local" with 2 GPUs; a job sees its indices in
CUDA_VISIBLE_DEVICES). The kernel gets what a single-user server gives it: $COMPUTEHUB_URL
(the service through the proxy) and $JUPYTERHUB_API_TOKEN, a token of alice's holding only the
scopes configure_jupyterhub adds to Spawner.server_token_scopes. The magics are not loaded by
hand: the kernel reads the IPython kernel config the wheel installs (copied to its IPYTHONDIR).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "hub_ext"))
sys.path.insert(0, str(ROOT / "tests" / "spawner"))
from realhub import free_port  # noqa: E402
from launcherhub import kill_jobs, launcher_hub, launcher_pids, wait_for  # noqa: E402
from kernelrun import Kernel  # noqa: E402

SERVER_SCOPES = ["custom:computehub:submit", "access:services!service=computehub"]

SLEEPER = """import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
print("sleeping", flush=True)
time.sleep(600)
"""
WRITER = """import os, time
open("out.txt", "w").write("gpus=" + os.environ["CUDA_VISIBLE_DEVICES"])
print("wrote out.txt", flush=True)
time.sleep(1)
ckpt = os.path.join(os.environ["COMPUTEHUB_CHECKPOINT_DIR"], "last.pt")
open(ckpt + ".tmp", "w").write("step 1")
os.replace(ckpt + ".tmp", ckpt)
time.sleep(6)
"""
ECHO = """import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Echo(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "sneaky=1; Path=/")
        self.end_headers()
        self.wfile.write(body)

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Echo).serve_forever()
"""
RANKS = """import os, time
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")
line = " ".join(k + "=" + os.environ[k] for k in keys) + " t=%f" % time.time()
open("rank-%s.txt" % os.environ["RANK"], "w").write(line)
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("magics")
    hub, work = launcher_hub(tmp)
    kernel = None
    try:
        hub.start()
        wait_for("the launcher", lambda: launcher_pids(hub), 60)
        for name, text in (("sleeper.py", SLEEPER), ("write.py", WRITER), ("ranks.py", RANKS), ("echo.py", ECHO)):
            (work / name).write_text(text)
        (work / "site").mkdir()
        (work / "site" / "hello.txt").write_text("hello from the service")
        ipydir = tmp / "ipython"
        (ipydir / "profile_default").mkdir(parents=True)
        shutil.copy(ROOT / "labextension" / "etc" / "ipython_kernel_config.py", ipydir / "profile_default")
        env = dict(os.environ, COMPUTEHUB_URL=hub.service_url, IPYTHONDIR=str(ipydir),
                   JUPYTERHUB_API_TOKEN=hub.make_token("alice", scopes=SERVER_SCOPES))
        env.pop("COMPUTEHUB_TOKEN", None)
        kernel = Kernel(work, env)
        yield hub, work, kernel
    finally:
        if kernel is not None:
            kernel.stop()
        hub.stop()
        kill_jobs(hub)


def job_id(kernel: Kernel, out: dict) -> str:
    assert not out["error"] and not out["stderr"], out
    m = re.search(r"<Job (w\d+) ", out["result"])
    assert m, out
    return m.group(1)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def written(path) -> str:
    """The file's text once the job has written it: a file that exists may still be empty
    while the job's process has not yet flushed its write."""
    try:
        return path.read_text()
    except OSError:
        return ""


def test_submit_queue_cancel_states_file_and_logs(setup):
    hub, work, k = setup
    blocker = job_id(k, k.run("%submit --gpus 2 --name blocker sleeper.py blocker.pid"))
    pid = int(wait_for("the blocker to run", lambda: (work / "blocker.pid").exists()
                       and (work / "blocker.pid").read_text(), 60))
    out = k.run("%submit --gpus 1 --time 5m --checkpoint-every 30m write.py")
    wid = job_id(k, out)
    w = hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()
    assert (w["time_limit"], w["checkpoint_every"]) == (300, 1800), w
    did = out["display_ids"][0]
    queued = wait_for("a queue position in the display",
                      lambda: [t for t in k.display_texts(did) if "queued, position 1 in vision" in t], 30)
    assert "ETA" in queued[0] and "\n" in queued[0], queued      # with the reason on the next line
    assert not (work / "out.txt").exists()
    why = hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()["explanation"]["reason"]
    row = next(r for r in k.run("%jobs")["stdout"].splitlines() if r.startswith(wid))
    assert "pending" in row and why[:100] in row, (row, why)      # %jobs says why it waits

    out = k.run(f"%cancel {blocker}")
    assert out["stdout"].strip() == f"{blocker}: cancelling (it is being stopped; its GPUs return once it has)", out
    wait_for("the blocker's process to be stopped", lambda: not alive(pid), 30)

    assert wait_for("out.txt", lambda: written(work / "out.txt"), 60) in ("gpus=0", "gpus=1")
    wait_for("the display to say finished", lambda: any("finished, exit code 0" in t for t in k.display_texts(did)),
             60)
    texts = k.display_texts(did)
    first = {s: next(i for i, t in enumerate(texts) if s in t) for s in ("queued", "running on local GPU",
                                                                          "finished, exit code 0")}
    assert first["queued"] < first["running on local GPU"] < first["finished, exit code 0"], texts
    # The checkpoint it saved while running reached the display (through the launcher and service).
    assert any(re.search(r"running on local GPU \d — checkpoint saved \d+s ago", t) for t in texts), texts
    # While it ran, the display showed its output's last lines under the headline.
    assert any("running on local GPU" in t and "\nwrote out.txt" in t for t in texts), texts
    assert "GPU-hours" in texts[-1], texts

    out = k.run(f"%logs {wid}")
    assert "wrote out.txt" in out["stdout"], out
    out = k.run("%jobs --all")
    assert re.search(rf"{wid}\s+-\s+training\s+finished", out["stdout"]), out
    assert re.search(rf"{blocker}\s+blocker\s+training\s+cancelled", out["stdout"]), out
    # The latest only, from the service's newest-first page: the blocker came first, so it is left out.
    out = k.run("%jobs --all --limit 1")
    assert re.search(rf"{wid}\s+-\s+training\s+finished", out["stdout"]) and blocker not in out["stdout"], out
    assert "(your latest 1; %jobs --all --limit N for more)" in out["stdout"], out


def test_two_workers_start_only_as_a_gang_with_consistent_ranks(setup):
    hub, work, k = setup
    blocker = job_id(k, k.run("%submit --gpus 1 sleeper.py one.pid"))
    wait_for("the 1-GPU blocker to run", lambda: (work / "one.pid").exists(), 60)
    gang = job_id(k, k.run("%submit --workers 2 --gpus 1 ranks.py"))
    time.sleep(3)          # one GPU is free, the gang needs two: nothing of it may start
    r = hub.call("GET", f"/workloads/{gang}", hub.tokens["alice"]).json()
    assert r["state"] == "pending", r
    assert not list(work.glob("rank-*.txt"))
    cancelled_at = time.time()
    k.run(f"%cancel {blocker}")
    texts = wait_for("both ranks", lambda: (lambda t: len(t) == 2 and all(t) and t)(
        [written(p) for p in sorted(work.glob("rank-*.txt"))]), 60)
    envs = [dict(kv.split("=", 1) for kv in t.split()) for t in texts]
    assert [e["RANK"] for e in envs] == ["0", "1"] and [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in envs) == ["0", "1"]
    assert all(float(e["t"]) > cancelled_at for e in envs)


def test_serve_answers_through_the_proxy_with_a_token_only(setup):
    hub, work, k = setup
    out = k.run("%serve --gpus 1 python -m http.server $PORT --directory site")
    wid = job_id(k, out)
    line = wait_for("the URL", lambda: re.search(rf"{wid} is ready at (\S+)", k.all_stdout()), 60)
    url = line.group(1)
    assert url == f"{hub.service_url}/serve/{wid}/"
    r = requests.get(url + "hello.txt", headers={"Authorization": f"token {hub.tokens['alice']}"}, timeout=10)
    assert r.status_code == 200 and r.text == "hello from the service", (r.status_code, r.text)
    r = requests.get(url + "hello.txt", timeout=10)
    assert r.status_code == 401 and "hello" not in r.text, r.text
    r = requests.get(url + "hello.txt", headers={"Authorization": f"token {hub.tokens['bob']}"}, timeout=10)
    assert r.status_code == 404, r.text                         # someone else's service is not there for bob
    k.run(f"%cancel {wid}")
    r = requests.get(url + "hello.txt", headers={"Authorization": f"token {hub.tokens['alice']}"}, timeout=10)
    assert r.status_code == 404, r.text


def test_serve_forwards_without_hub_credentials_and_lets_admins_in(setup):
    hub, work, k = setup
    wid = job_id(k, k.run("%serve --gpus 0 python echo.py"))
    wait_for("the URL", lambda: re.search(rf"{wid} is ready at (\S+)", k.all_stdout()), 60)
    url = f"{hub.service_url}/serve/{wid}/"
    r = requests.get(url + "some/path?q=1", headers={"Authorization": f"token {hub.tokens['ada']}",
                                                      "Cookie": "jupyterhub-session-id=secret"}, timeout=10)
    assert r.status_code == 200, r.text
    seen = r.json()
    assert seen["path"] == "/some/path?q=1"
    names = {h.lower(): v for h, v in seen["headers"].items()}
    assert "authorization" not in names and "cookie" not in names, names
    assert names["x-forwarded-user"] == "ada" and names["x-forwarded-prefix"] == f"/services/computehub/serve/{wid}/"
    assert "sneaky" not in r.headers.get("Set-Cookie", "")
    assert r.headers["Date"].count("GMT") == 1 and "," not in r.headers["Server"], r.headers
    # The owner's code, shown to an admin, runs sandboxed in an origin of its own: it cannot read
    # the hub's pages (their XSRF token) or act with the admin's login. Its owner sees it plain.
    csp = r.headers.get("Content-Security-Policy", "")
    assert csp.startswith("sandbox ") and "allow-scripts" in csp and "allow-same-origin" not in csp, r.headers
    mine = requests.get(url + "x", headers={"Authorization": f"token {hub.tokens['alice']}"}, timeout=10)
    assert mine.status_code == 200 and "Content-Security-Policy" not in mine.headers, mine.headers
    # The path is forwarded as one path: what was quoted stays quoted, nothing splits the request.
    odd = requests.get(url + "a%20b/c%3Fd%23e/%0D%0AX-Injected:%201",
                       headers={"Authorization": f"token {hub.tokens['alice']}"}, timeout=10)
    assert odd.status_code == 200, odd.text
    assert odd.json()["path"] == "/a%20b/c%3Fd%23e/%0D%0AX-Injected:%201", odd.json()
    assert "x-injected" not in {h.lower() for h in odd.json()["headers"]}
    k.run(f"%cancel {wid}")


@pytest.mark.parametrize("line, says", [
    ("%submit --gpus -1 write.py", "--gpus must be 0 or more, not -1"),
    ("%submit --time banana write.py", "--time expects seconds or a duration"),
    ("%submit --checkpoint-every often write.py", "--checkpoint-every expects seconds or a duration"),
    ("%submit --frobnicate write.py", "unrecognized arguments: --frobnicate"),
    ("%submit --queue nosuch write.py", "unknown queue 'nosuch'"),
    ("%submit missing.py", "no such file: missing.py"),
    ("%serve", "%serve needs a command"),
    ("%logs", "%logs needs a job id"),
    ("%cancel", "%cancel needs one or more job ids"),
    ("%hold", "%hold needs one or more job ids"),
    ("%release", "%release needs one or more job ids"),
    ("%top", "%top needs one or more job ids"),
    ("%submit --after w1:soon write.py", "'w1:soon' is not a workload id"),
    ("%logs --tail 0 w1", "--tail must be from 1 to 100000"),
    ("%submit --mail end write.py", "this ComputeHub sends no mail (its admin sets"),   # the magic passes it on
    ("%cancel --state pending w1", "--state picks tasks of job arrays: give --array too"),
    ("%submit --begin soon write.py", "--begin expects a time: 2h or now+90m (from now), 22:00"),
    ("%hold --until someday w1", "--until expects a time: 2h or now+90m (from now), 22:00"),
    ("%update --array w1 --state running --time 1h", "--state: 'running' is not a state it may pick; one or more "
                                                     "of held, pending, awaiting_approval"),
])
def test_bad_arguments_give_one_clear_line(setup, line, says):
    _, _, k = setup
    out = k.run(line)
    text = (out["stdout"] + out["stderr"] + out["error"]).strip()
    assert says in text and "\n" not in text and "Traceback" not in text, out


def test_missing_scope_or_service_give_one_clear_line(setup):
    hub, _, k = setup
    k.run(f"import os; os.environ['JUPYTERHUB_API_TOKEN'] = {hub.make_token('alice', scopes=[SERVER_SCOPES[1]])!r}")
    out = k.run("%submit write.py")
    text = (out["stdout"] + out["stderr"] + out["error"]).strip()
    assert "lacks the scope to submit work (custom:computehub:submit)" in text and "\n" not in text, out
    k.run(f"os.environ['JUPYTERHUB_API_TOKEN'] = {hub.make_token('alice', scopes=SERVER_SCOPES)!r}; "
          f"os.environ['COMPUTEHUB_URL'] = 'http://127.0.0.1:{free_port()}/services/computehub'")
    out = k.run("%jobs")
    text = (out["stdout"] + out["stderr"] + out["error"]).strip()
    assert text.startswith("computehub: cannot reach ComputeHub at") and "\n" not in text, out
    k.run(f"os.environ['COMPUTEHUB_URL'] = {hub.url + '/services/nosuch'!r}")     # the hub, no such service
    out = k.run("%submit write.py")
    text = (out["stdout"] + out["stderr"] + out["error"]).strip()
    assert text.startswith("computehub: no ComputeHub service at") and "\n" not in text, out
    k.run(f"os.environ['COMPUTEHUB_URL'] = {hub.service_url!r}")


def test_cell_magic_runs_the_cell_as_the_job(setup):
    hub, work, k = setup
    out = k.run("%%submit --gpus 0 --name from-a-cell hello\n"
                "import os, sys\nopen('cell.txt', 'w').write(sys.argv[1] + ' from ' + os.getcwd())\n")
    wid = job_id(k, out)
    assert wait_for("cell.txt", lambda: written(work / "cell.txt"), 60) == f"hello from {work}"
    w = wait_for("it to finish", lambda: (lambda w: w["state"] == "finished" and w)(
        hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()), 30)
    assert w["name"] == "from-a-cell" and w["exit_code"] == 0


def test_a_failed_job_shows_its_exit_code_and_last_lines(setup):
    _, _, k = setup
    out = k.run("%%submit --gpus 0\nprint('loss is nan, giving up', flush=True)\nraise SystemExit(3)\n")
    job_id(k, out)
    did = out["display_ids"][0]
    shown = wait_for("the failure in the display",
                     lambda: [t for t in k.display_texts(did) if "failed, exit code 3" in t], 60)
    assert "loss is nan, giving up" in shown[-1], shown


def test_the_python_client_submits_waits_and_reads_logs(setup):
    _, _, k = setup
    out = k.run("from labextension import jobs\n"
                "j = jobs.submit('write.py', gpus=0, time_limit='2m', name='from-python')\n"
                "w = j.wait(timeout=90, every=0.5)\n"
                "print(w['state'], w['exit_code'], w['time_limit'], 'wrote out.txt' in j.logs())\n"
                "print(any(x['id'] == j.id for x in jobs.jobs(include_ended=True)))", timeout=120)
    assert out["stdout"].split() == ["finished", "0", "120.0", "True", "True"], out
    out = k.run("try:\n    jobs.submit('write.py', gpus=-2)\nexcept jobs.JobError as e:\n    print(e)")
    assert out["stdout"].strip() == "gpus must be a whole number 0 or more, not -2", out


def test_logs_follow_shows_each_line_once_until_the_job_ends(setup):
    _, _, k = setup
    out = k.run("%%submit --gpus 0 --name ticker\nimport sys, time\nfor i in range(12):\n"
                "    print(f'tick {i}', flush=True)\n    time.sleep(0.3)\n"
                "sys.stdout.write('no newline at the end'); sys.stdout.flush()\n")
    wid = job_id(k, out)
    out = k.run(f"%logs {wid} --follow --tail 100", timeout=120)
    assert not out["error"] and not out["stderr"], out
    lines = out["stdout"].splitlines()
    assert [x for x in lines if x.startswith("tick")] == [f"tick {i}" for i in range(12)], lines
    # The job's last line, which it never ended, is shown once the job has ended.
    assert "no newline at the end" in lines and lines[-1] == f"[{wid} finished]", lines


def test_a_job_runs_after_the_one_it_names(setup):
    """`--after {first.id}` (IPython expands it): held while the first runs, started once it has
    finished; a job after one that can no longer end as asked is refused, saying why."""
    hub, work, k = setup
    (work / "step1.py").write_text("import time\ntime.sleep(3)\nopen('step1.txt', 'w').write('done')\n")
    (work / "step2.py").write_text("print('step2 read', open('step1.txt').read(), flush=True)\n")
    k.run("first = %submit --gpus 1 step1.py")
    out = k.run("then = %submit --gpus 1 --after {first.id} step2.py\nthen")
    wid = job_id(k, out)
    assert "held" in out["result"], out
    texts = wait_for("held in the display", lambda: [t for t in k.display_texts(out["display_ids"][0])
                                                       if ": held in vision" in t], 30)
    assert f"runs after {k.value('first.id')} finishes" in texts[0], texts
    out = k.run("w = then.wait(timeout=90, every=0.5)\nprint(w['state'], then.logs()[-1])", timeout=120)
    assert out["stdout"].split() == ["finished", "step2", "read", "done"], out
    assert written(work / "step1.txt") == "done"
    assert hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()["eligible_at"] is not None

    out = k.run("%submit --gpus 0 --after {then.id}:failed step2.py")     # it finished: refused, saying so
    assert out["stderr"].strip() == (f"computehub: after: {wid} finished; work to run after it ends without "
                                     "finishing would never start"), out


def test_hold_and_release_from_the_notebook(setup):
    """`%submit --hold` waits for `%release`; `%hold` of a job that already runs is one clear line."""
    _, work, k = setup
    (work / "held.py").write_text("print('ran after its release', flush=True)\n")
    out = k.run("j = %submit --gpus 0 --hold held.py\nj")
    wid = job_id(k, out)
    assert "held" in out["result"], out
    texts = wait_for("held in the display", lambda: [t for t in k.display_texts(out["display_ids"][0])
                                                     if ": held in vision" in t], 30)
    assert "held by alice: held at submission" in texts[0], texts
    assert k.run(f"%release {wid}")["stdout"].strip() == f"{wid}: pending", out
    out = k.run("w = j.wait(timeout=60, every=0.5)\nprint(w['state'], j.logs()[-1])", timeout=90)
    assert out["stdout"].strip() == "finished ran after its release", out
    out = k.run(f"%hold --reason later {wid}")
    assert out["stderr"].strip() == (f"computehub: workload {wid} is finished; only waiting work (pending, or "
                                     "held for the work it runs after) can be held"), out


TASK = """import os, sys, time
t0 = time.time()
time.sleep(1.5)
task = os.environ["COMPUTEHUB_ARRAY_TASK_ID"]
open("task-%s.txt" % task, "w").write("%s %s %f %f" % (os.environ["COMPUTEHUB_ARRAY_ID"],
                                                       os.environ["COMPUTEHUB_ARRAY_TASK_COUNT"], t0, time.time()))
print("task", task, flush=True)
"""


def test_a_job_array_runs_each_index_at_most_n_at_a_time(setup):
    """`%submit --array 1-4%2`: four real processes, each told its index, never more than two at
    once; one display follows them all; `--array` on %hold/%release/%cancel acts on every task."""
    _, work, k = setup
    (work / "task.py").write_text(TASK)
    out = k.run("sweep = %submit --gpus 0 --array 1-4%2 --name sweep task.py\nsweep")
    assert not out["error"] and not out["stderr"], out
    m = re.search(r"<JobArray (w\d+): 4 tasks, at most 2 at a time>", out["result"])
    assert m, out
    first = m.group(1)
    (work / "gather.py").write_text("import glob\nprint('gathered', len(glob.glob('task-*.txt')), flush=True)\n")
    out2 = k.run("from labextension import jobs\ngather = jobs.submit('gather.py', gpus=0, after=sweep)\n"
                 "print(gather.last['state'], gather.last['after'] == [t.id + ':ok' for t in sweep])")
    assert out2["stdout"].split() == ["held", "True"], out2              # after every task (w…[])
    out2 = k.run("w = sweep.wait(timeout=90, every=0.5)\nprint(sorted(x['state'] for x in w), "
                 "sweep[2].logs()[-1])", timeout=120)
    assert out2["stdout"].strip() == "['finished', 'finished', 'finished', 'finished'] task 3", out2
    out2 = k.run("print(gather.wait(timeout=60, every=0.5)['state'], gather.logs()[-1])", timeout=90)
    assert out2["stdout"].strip() == "finished gathered 4", out2
    runs = []
    for index in (1, 2, 3, 4):
        array, count, start, end = written(work / f"task-{index}.txt").split()
        assert (array, count) == (first, "4")
        runs.append((float(start), float(end)))
    overlap = max(sum(1 for s, e in runs if s <= t < e) for t, _ in runs)
    assert overlap <= 2, runs                               # the cap: never three at once
    texts = wait_for("the display at its end", lambda: [t for t in k.display_texts(out["display_ids"][0])
                                                        if "4 finished" in t], 30)
    assert texts[-1].startswith(f"array {first} (sweep): 4 tasks, at most 2 at a time — 4 finished"), texts

    out = k.run("later = %submit --gpus 0 --array 0-2 --hold task.py\nprint(later.id, len(later))")
    later = out["stdout"].split()[0]
    assert out["stdout"].split()[1] == "3" and not out["stderr"], out
    tasks = [f"w{int(later[1:]) + i:07d}" for i in range(3)]
    rows = [line for line in k.run("%jobs")["stdout"].splitlines() if f"{later}[" in line]
    assert len(rows) == 1 and rows[0].split()[:2] == [later, f"{later}[0-2]"], rows     # one row for the three
    out = k.run("answer = later.set_limit(1)\nprint(answer['limit'], len(answer['tasks']), later.limit)")
    assert out["stdout"].split() == ["1", "3", "1"], out
    out = k.run(f"%logs {later}[2]\n%logs {later}[5]")                # a task by its array and index
    assert out["stdout"].strip() == f"{tasks[2]}: no output yet", out
    assert out["stderr"].strip() == f"computehub: {later}[5]: no task 5 of a job array {later} you may see", out
    out = k.run(f"%release --array {later}")                          # one request for the three
    assert out["stdout"].strip() == f"array {later}: released 3 tasks ({', '.join(tasks)}): 3 pending", out
    out = k.run(f"%hold --array {later} --reason again")
    assert out["stdout"].startswith(f"array {later}: held "), out        # those not started meanwhile
    out = k.run(f"%update --array {later} --state held --name late")       # only the tasks held again
    assert re.match(rf"w\d+  held  queue \S+, 0, no limit \(\d waiting tasks? of array {later}\)", out["stdout"]), out
    out = k.run("print(sorted({(t['state'] == 'held', t['name'] == 'late') for t in later.tasks()}))")
    assert out["stdout"].strip() in ("[(True, True)]", "[(False, False), (True, True)]"), out
    out = k.run("answer = later.release()\nprint(sorted(set(answer['states'].values())), answer['refused'])")
    assert out["stdout"].split() == ["['pending']", "{}"], out
    out = k.run(f"%cancel --array {later}")
    assert out["stdout"].startswith(f"array {later}: cancelled 3 tasks ({', '.join(tasks)}): "), out
    out = k.run(f"%hold --array {later}")            # nothing left waiting to hold
    assert re.fullmatch(rf"computehub: (no job array '{later}' with tasks waiting or running|job array {later} has "
                        r"no tasks waiting and not held already \(1 live: 1 cancelling\))", out["stderr"].strip()), out
    out = k.run("print(later.cancel()['tasks'])")     # from Python: nothing left is nothing to do
    assert out["stdout"].strip() == "[]", out
    out = k.run("kept = %submit --gpus 0 --array 0-1 --hold task.py\nprint(kept.id)")
    kept = out["stdout"].strip()
    out = k.run(f"%cancel --array {kept} --state pending")               # --state: only those in line
    assert out["stderr"].strip() == (f"computehub: job array {kept} has no tasks still live and not being stopped "
                                     "already among those pending (2 live: 2 held)"), out
    out = k.run("print(kept.cancel(states=['held'])['tasks'] == [t.id for t in kept])")
    assert out["stdout"].strip() == "True", out
    out = k.run("%submit --gpus 0 --array 0-x task.py")
    assert "array: '0-x' is not an index or a range" in out["stderr"], out


def test_a_jobs_mail_is_changed_from_the_notebook(setup):
    """`Job.mail()` through the real service (which sends no mail here: asking is refused in one
    line, taking it back is accepted)."""
    hub, work, k = setup
    (work / "mailed.py").write_text("print('never runs', flush=True)\n")
    out = k.run("j = %submit --gpus 0 --hold mailed.py\nprint(j.mail('none')['metadata'].get('mail'), "
                "j.last['state'])")
    assert out["stdout"].strip() == "None held", out
    out = k.run("j.mail('end,fail')")
    text = (out["stdout"] + out["stderr"] + out["error"]).strip()
    assert "this ComputeHub sends no mail (its admin sets ComputeHubService.smtp_host" in text, out
    assert "mail" not in hub.call("GET", f"/workloads/{k.value('j.id')}", hub.tokens["alice"]).json()["metadata"]
    k.run("j.cancel()")


def test_a_job_that_begins_later_is_held_until_then(setup):
    """`%submit --begin 2h` and `jobs.submit(begin=datetime)` through the real service: held, with
    the begin time it asked for (the service lets it go then: test_holds_hub)."""
    _, work, k = setup
    (work / "later.py").write_text("print('later', flush=True)\n")
    out = k.run("import time, datetime\nj = %submit --gpus 0 --begin 2h later.py\n"
                "print(j.last['state'], round((j.last['metadata']['hold']['until'] - time.time()) / 60))")
    assert out["stdout"].strip() == "held 120", out
    out = k.run("%hold {j.id} --until 3h\nprint(round((j.status()['metadata']['hold']['until'] - time.time()) / 60))")
    lines = out["stdout"].strip().splitlines()                      # its begin time moved: one request
    assert lines[0].startswith(f"{k.value('j.id')}: held (held until ") and lines[1] == "180", out
    out = k.run("from labextension import jobs\nat = datetime.datetime.now() + datetime.timedelta(hours=3)\n"
                "j2 = jobs.submit('later.py', gpus=0, begin=at)\n"
                "print(j2.last['state'], abs(j2.last['metadata']['hold']['until'] - at.timestamp()) < 1)")
    assert out["stdout"].strip() == "held True", out
    out = k.run("print(j2.top()['metadata']['top'] > 0, j2.last['state'])")     # first among my own
    assert out["stdout"].strip() == "True held", out
    out = k.run("%top {j.id} {j2.id}")                   # said in the order named: j first, then j2
    lines = out["stdout"].strip().splitlines()
    assert [x.split(":")[0] for x in lines] == [k.value("j.id"), k.value("j2.id")], out
    assert lines[0].endswith("held (first among your training work in queue vision)"), out
    stamps = k.value("j.status()['metadata']['top'] > j2.status()['metadata']['top']")
    assert stamps == "True", stamps                      # j put first last: it goes first
    k.run("j.cancel(); j2.cancel()")


def test_a_waiting_job_is_changed_from_the_notebook(setup):
    """`Job.update()` through the real service: a held job asks for other resources and a shorter
    limit; asking for more time raises JobError saying only an admin gives it, nothing changed."""
    hub, work, k = setup
    (work / "changed.py").write_text("print('never runs', flush=True)\n")
    out = k.run("j = %submit --gpus 0 --cpu 1 --time 1h --hold changed.py\n"
                "w = j.update(cpu='500m', memory='1Gi', time_limit=600, name='smaller')\n"
                "print(w['resources'], w['time_limit'], w['name'], w['state'])")
    assert out["stdout"].strip() == "{'cpu': '500m', 'memory': 1073741824} 600.0 smaller held", out
    out = k.run("j.update(time_limit=7200)")
    text = (out["stdout"] + out["stderr"] + out["error"]).strip()
    assert "JobError" in text and "only an admin may give workload" in text, out
    assert hub.call("GET", f"/workloads/{k.value('j.id')}", hub.tokens["alice"]).json()["time_limit"] == 600
    k.run("j.cancel()")


def test_update_magic_tries_then_changes_and_says_what_is_wrong_in_one_line(setup):
    """`%update` through the real service: tried first (nothing changes), then made; a mistake in an
    option or a refusal by the service is one line, never a traceback."""
    hub, work, k = setup
    (work / "upd.py").write_text("print('never runs', flush=True)\n")
    k.run("j = %submit --gpus 0 --cpu 1 --time 1h --hold upd.py")
    wid = k.value("j.id")
    out = k.run(f"%update {wid} --cpu 500m --test-only")
    assert out["stdout"].strip() == (f"{wid}  with the change: queue vision, 0, limit 3600 s; #1 in line, starts now "
                                     "if released now (now: #1 in line, starts now if released now); nothing "
                                     "changed"), out
    assert hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()["resources"]["cpu"] == "1000m"
    out = k.run(f"%update {wid} --cpu 500m --time 30m --name smaller")
    assert out["stdout"].strip() == f"{wid}  held  queue vision, 0, limit 1800 s  (held by alice: held at " \
        f"submission; it starts only once released (computehub release {wid}))", out
    w = hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()
    assert (w["resources"]["cpu"], w["time_limit"], w["name"]) == ("500m", 1800, "smaller")
    for line, words in ((f"%update {wid} --time 2h", "only an admin may give workload"),
                        (f"%update {wid} --gpus two", "--gpus is a whole number, not 'two'"),
                        (f"%update {wid}", "say what to change"),
                        ("%update --gpus 1", "%update needs one or more job ids")):
        out = k.run(line)
        text = (out["stdout"] + out["stderr"] + out["error"]).strip()
        assert words in text and "Traceback" not in text and len(text.splitlines()) == 1, (line, out)
    k.run("j.cancel()")
