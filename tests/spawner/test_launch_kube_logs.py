"""A Kubernetes job's output reaches its log while it runs (spawner/kube_logs.py): each line once,
a gang's workers named and in the order they wrote, across a launcher restart, and what is left
when it ends.

Real: the launcher driver (LauncherApp's reconcile loop) with the KubeLauncher backend, talking
HTTP to the Kubernetes API through a kubeconfig. Emulated: the Kubernetes API (kmock,
tests/spawner/kmock_cluster.py), whose ``pods/log`` serves what the test writes for a pod,
stamped as the kubelet stamps it; the job controller; the service (a recorder of reports).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spawner.kube_logs import new_lines, stamp_key  # noqa: E402
from spawner.launch_kube import KubeLauncher  # noqa: E402
from test_launch_kube_failures import NS, cluster, scenario, workload  # noqa: E402,F401 - the same fixture

RUNNING = {"phase": "Running", "containerStatuses": [{"name": "job", "ready": True, "restartCount": 0,
                                                     "image": "", "imageID": "", "state": {"running": {}}}]}


def log_lines(tmp_path: Path, wid: str, notes: bool = False) -> list[str]:
    """The workload's log; without the launcher's own notes ("[computehub] created ...") unless ``notes``."""
    try:
        lines = (tmp_path / f"{wid}.log").read_text().splitlines()
    except FileNotFoundError:
        return []
    return lines if notes else [line for line in lines if not line.startswith("[computehub] ")]


def test_new_lines_skips_what_was_shipped_even_at_the_same_instant():
    text = "2026-12-07T04:00:00.1Z a\n2026-12-07T04:00:00.100000000Z b\n2026-12-07T04:00:01Z c\n"
    out, mark = new_lines(text, None)
    assert [line for _, line in out] == ["a", "b", "c"] and mark == ["2026-12-07T04:00:01Z", 1]
    out, mark = new_lines(text + "2026-12-07T04:00:01Z d\n2026-12-07T04:00:02.5Z \n", mark)
    assert [line for _, line in out] == ["d", ""] and mark == ["2026-12-07T04:00:02.5Z", 1]
    out, mark = new_lines("2026-12-07T04:00:00.1Z a\n2026-12-07T04:00:00.1Z b\n", ["2026-12-07T04:00:00.1Z", 1])
    assert [line for _, line in out] == ["b"] and mark == ["2026-12-07T04:00:00.1Z", 2]
    assert stamp_key("2026-12-07T04:00:00.1Z") == stamp_key("2026-12-07T04:00:00.100Z") > \
        stamp_key("2026-12-07T04:00:00.09Z")


def test_a_gangs_output_is_in_its_log_while_it_runs_each_line_once(cluster, tmp_path):  # noqa: F811
    async def body(d):
        w = workload("wlogs001", workers=2)
        await d.admit(w)
        pods = [await d.worker(w["id"], i) for i in (0, 1)]
        for name in pods:
            await d.pod_status(name, RUNNING)
        at = time.time()
        cluster.write_pod_log(NS, pods[1], ["loading data"], at=at)
        cluster.write_pod_log(NS, pods[0], ["epoch 1", "epoch 1"], at=at + 0.001)   # the same instant, twice
        await d.until("the first lines", lambda: len(log_lines(tmp_path, w["id"])) >= 3)
        cluster.write_pod_log(NS, pods[0], ["epoch 2"], at=at + 0.001)           # still that instant: new
        cluster.write_pod_log(NS, pods[1], ["epoch 2 on worker 1"])
        await d.until("the next lines", lambda: len(log_lines(tmp_path, w["id"])) >= 5)
        await d.look(5)
        assert log_lines(tmp_path, w["id"]) == [
            "[worker 1] loading data", "[worker 0] epoch 1", "[worker 0] epoch 1", "[worker 0] epoch 2",
            "[worker 1] epoch 2 on worker 1"]
        assert os.path.exists(tmp_path / f"{w['id']}.log.pods")

        # A restarted launcher goes on where the last one stopped: nothing twice.
        await d.backend.close()
        d.backend = d.app.backend = KubeLauncher(namespace=NS, kubeconfig=cluster.kubeconfig, logs_dir=str(tmp_path),
                                                 log_interval=0)
        cluster.write_pod_log(NS, pods[0], ["epoch 3"])
        await d.until("epoch 3", lambda: "[worker 0] epoch 3" in log_lines(tmp_path, w["id"]))
        await d.look(3)
        assert log_lines(tmp_path, w["id"])[5:] == ["[worker 0] epoch 3"]

        # Lines written just before the end are in the log once it has ended; the marks go with it.
        cluster.write_pod_log(NS, pods[1], ["saved model"])
        await d.job_status(w["id"], {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]})
        await d.until("finished", lambda: d.state("finished"))
        assert log_lines(tmp_path, w["id"])[6:] == ["[worker 1] saved model"]
        await d.until("the marks gone", lambda: not os.path.exists(tmp_path / f"{w['id']}.log.pods"))
    scenario(cluster, tmp_path, body, log_interval=0)


def test_a_single_pods_lines_have_no_prefix_and_a_pod_without_logs_is_said_at_the_end(cluster, tmp_path):  # noqa: F811
    async def body(d):
        w = workload("wlogs002")
        await d.admit(w)
        pod = await d.worker(w["id"], 0)
        await d.pod_status(pod, RUNNING)
        cluster.write_pod_log(NS, pod, ["hello", "\x1b[31mred\x1b[0m"])
        await d.until("its lines", lambda: len(log_lines(tmp_path, w["id"])) >= 2)
        assert log_lines(tmp_path, w["id"]) == ["hello", "\x1b[31mred\x1b[0m"]   # kept as written; readers escape

        w2 = workload("wlogs003")
        await d.admit(w2)
        other = await d.worker(w2["id"], 0)
        await d.pod_status(other, RUNNING)          # running, but the emulated API has no log for it
        await d.job_status(w2["id"], {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                                    "reason": "BackoffLimitExceeded"}]})
        await d.until("failed", lambda: d.state("failed"))
        said = log_lines(tmp_path, w2["id"], notes=True)
        assert any(line.startswith(f"[computehub] logs of pod {other} not available: 404") for line in said), said
    scenario(cluster, tmp_path, body, log_interval=0)


def test_a_negative_log_interval_is_refused_saying_so():
    import pytest
    from scheduler.config_checks import ConfigError
    with pytest.raises(ConfigError, match=r"KubeLauncher.log_interval must be at least 0 \(seconds\), not -1.0"):
        KubeLauncher(log_interval=-1)
