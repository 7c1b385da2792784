"""How spawner/kube_failures.py puts a pod's status in words (pure: pods as the API's JSON, as
the tests of the launcher and the spawner write them in place of a kubelet). Nothing emulated."""

from __future__ import annotations

from spawner.kube_failures import node_gone, node_state, pod_trouble, quantity

NOW = 1_800_000_000.0
MADE = "2027-01-15T08:00:00Z"        # the pods' creation; age(s) is that plus s seconds


def age(seconds: float) -> float:
    from spawner.kube_failures import parse_time
    return parse_time(MADE) + seconds


def pod(status: dict, memory: str | None = None, node: str = "n3") -> dict:
    limits = {"memory": memory} if memory else {}
    return {"metadata": {"name": "p", "creationTimestamp": MADE},
            "spec": {"nodeName": node, "containers": [{"name": "worker", "image": "foo:bar",
                                                      "resources": {"limits": limits}}]},
            "status": status}


def waiting(reason: str, message: str = "") -> dict:
    return {"phase": "Pending", "hostIP": "10.0.0.3", "containerStatuses": [
        {"name": "worker", "state": {"waiting": {"reason": reason, "message": message}}}]}


def test_memory_limits_read_as_people_write_them():
    assert [quantity(q) for q in ("8589934592", "2147483648", "1536Mi", "1G", "104857600", "1000")] == \
        ["8Gi", "2Gi", "1536Mi", "1G", "100Mi", "1000"]


def test_a_pull_error_waits_for_the_grace_a_bad_name_does_not():
    pulling = pod(waiting("ErrImagePull", "not found"))
    assert pod_trouble(pulling, "worker 0", age(59), pull_grace=60) is None
    t = pod_trouble(pulling, "worker 0", age(60), pull_grace=60)
    assert t.reason == "worker 0: image 'foo:bar' could not be pulled: ErrImagePull: not found" and not t.cluster
    t = pod_trouble(pod(waiting("InvalidImageName")), "worker 0", age(0), pull_grace=60)
    assert t.reason == "worker 0: image 'foo:bar' could not be pulled: InvalidImageName"
    # still being created by its kubelet (a big image): not a failure, whatever its age
    assert pod_trouble(pod(waiting("ContainerCreating")), "worker 0", age(10**6)) is None


def test_a_pod_a_kubelet_has_is_never_called_unscheduled():
    assert pod_trouble(pod({"phase": "Pending", "hostIP": "10.0.0.3"}), "w", age(10**6), pending_grace=1) is None
    t = pod_trouble(pod({"phase": "Pending"}), "w", age(5), pending_grace=1)
    assert t.cluster and t.reason == ("w was not started by node n3 for 5 s (the node is gone, NotReady or "
                                      "refuses it)")


def test_what_the_kubelet_refuses_or_preempts_is_the_clusters_doing():
    t = pod_trouble(pod({"phase": "Failed", "reason": "Preempting",
                         "message": "Preempted in order to admit critical pod"}), "w", NOW)
    assert t.cluster
    assert t.reason == "w: node n3 refused or lost it: Preempting: Preempted in order to admit critical pod"
    t = pod_trouble(pod({"phase": "Failed", "reason": "OutOfnvidia.com/gpu",
                         "message": "Pod was rejected: Node didn't have enough resource"}), "w", NOW)
    assert t.cluster and t.reason == ("w: node n3 refused or lost it: OutOfnvidia.com/gpu: Pod was rejected: "
                                      "Node didn't have enough resource")
    t = pod_trouble(pod({"phase": "Failed", "message": "something else"}), "w", NOW)
    assert not t.cluster and t.reason == "w failed: something else"


def test_an_exit_says_its_code_signal_and_oom_with_the_limit():
    def ended(code, reason=""):
        return pod({"phase": "Failed", "containerStatuses": [
            {"name": "worker", "state": {"terminated": {"exitCode": code, "reason": reason}}}]}, memory="8589934592")
    assert pod_trouble(ended(137, "OOMKilled"), "worker 1", NOW).reason == "worker 1 was OOMKilled (memory limit 8Gi)"
    assert pod_trouble(ended(143, "Error"), "w", NOW).reason == "w exited with code 143, signal 15 (Error)"
    assert pod_trouble(pod({"phase": "Succeeded", "containerStatuses": [
        {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]}), "w", NOW) is None


def test_a_vanished_pod_is_the_clusters_doing_only_when_its_node_is_not_there_ready_and_schedulable():
    def node(ready="True", unschedulable=False):
        return {"metadata": {"name": "n3"}, "spec": {"unschedulable": unschedulable},
                "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                          {"type": "Ready", "status": ready}]}}
    assert [node_state(n) for n in (None, node(ready="Unknown"), node(unschedulable=True), node())] == \
        ["deleted", "not ready", "drained", None]
    t = node_gone("p", "w", "n3", "deleted")
    assert t.cluster and t.reason == "w: its node n3 went away (deleted from the cluster); its pod p is gone"
    t = node_gone("p", "w", "n3", "not ready")
    assert t.cluster and t.reason == "w: its node n3 went away (NotReady or unreachable); its pod p is gone"
    t = node_gone("p", "w", "n3", "drained")
    assert t.cluster and t.reason == "w: its node n3 was drained (cordoned, its pods evicted); its pod p is gone"
    assert node_gone("p", "w", "n3", None) is None        # someone deleted the pod
