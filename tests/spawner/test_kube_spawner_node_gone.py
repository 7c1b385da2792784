"""Why a notebook server's pod vanished, as QueuedKubeSpawner judges it on one spawner object
without a hub (the end to end case, with the node read from the API: test_kube_spawner_failures.py):
a DisruptionTarget its last poll saw, else its node's state, from the Kubernetes API or, where
the hub may not read nodes (z2jh gives it no ClusterRole), from ComputeHub's inventory.

Emulated: the Kubernetes API (kmock for the client's configuration and serialisation; reading a
node answers 403, as to a hub without that role) and the ComputeHub service (a stand-in answering
GET nodes/<name> as the service's inventory would)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kmock_cluster import KmockCluster  # noqa: E402
from kube_profiles import NS  # noqa: E402

from spawner.service_client import ServiceError  # noqa: E402

POD = {"metadata": {"name": "jupyter-alice"}, "spec": {"nodeName": "kube-gpu-1"},
       "status": {"phase": "Running"}}
GC = {**POD, "status": {"phase": "Running", "conditions": [
    {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
     "message": "PodGC: node no longer exists"}]}}


class Service:
    """GET nodes/<name> as the service answers it: 404 for a node its inventory removed."""

    def __init__(self, node: dict | None):
        self.node, self.asked = node, []

    async def request(self, method, path, body=None):
        self.asked.append((method, path))
        if self.node is None:
            raise ServiceError(404, "not_found", "unknown node 'kube-gpu-1'")
        return self.node


@pytest.mark.parametrize("last,service,why", [
    (POD, None, "its node kube-gpu-1 went away (deleted from the cluster)"),
    (POD, {"healthy": False, "draining": False}, "its node kube-gpu-1 went away (NotReady or unreachable)"),
    (POD, {"healthy": True, "draining": True}, "its node kube-gpu-1 was drained (cordoned, its pods evicted)"),
    (POD, {"healthy": True, "draining": False}, None),
    (GC, {"healthy": True, "draining": False},
     "its node kube-gpu-1 went away (deleted from the cluster): PodGC: node no longer exists"),
], ids=["removed", "unhealthy", "draining", "fine", "seen-going"])
def test_a_vanished_pod_is_judged_by_its_node_where_the_hub_may_not_read_nodes(tmp_path, monkeypatch, last,
                                                                                 service, why):
    from kubernetes_asyncio.client.exceptions import ApiException
    from traitlets.config import Config

    from spawner.kube import QueuedKubeSpawner

    with KmockCluster(tmp_path) as cluster:
        import kubernetes_asyncio.config.kube_config as kc     # reads $KUBECONFIG at import time
        monkeypatch.setattr(kc, "KUBE_CONFIG_DEFAULT_LOCATION",
                            str(cluster.write_kubeconfig(tmp_path / "kubeconfig", NS)))
        c = Config()
        c.KubeSpawner.namespace = NS

        async def judge():
            sp = QueuedKubeSpawner(_mock=True, config=c)
            sp.pod_name = "jupyter-alice"

            async def forbidden(name, **kw):
                raise ApiException(status=403, reason="Forbidden")
            monkeypatch.setattr(sp.api, "read_node", forbidden)
            stand_in = Service(service)
            monkeypatch.setattr(sp, "client", lambda: stand_in)
            sp._last_pod = last
            return await sp._why_gone(), stand_in.asked

        gone, asked = asyncio.run(judge())
    if why is None:
        assert gone is None and asked == [("GET", "nodes/kube-gpu-1")]
        return
    assert gone == (f"the notebook server: {why}; its pod jupyter-alice is gone", True)
    assert asked == ([] if last is GC else [("GET", "nodes/kube-gpu-1")])
