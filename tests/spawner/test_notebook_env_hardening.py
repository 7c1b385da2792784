"""A notebook server's GPU variables (spawner/queueing.py ``get_env``, shared by the Kubernetes and
local spawners).

Unit level: JupyterHub's own ``Spawner.get_env`` (the hub's variables and the admin's
``environment``) is replaced by a fixed mapping; nothing else is emulated.

- On Kubernetes a notebook that got no GPU ran in a CUDA image that sets
  ``NVIDIA_VISIBLE_DEVICES=all``: on a node whose default container runtime is NVIDIA's, it
  saw every GPU of the node. It gets ``NVIDIA_VISIBLE_DEVICES=void`` now, unless an admin set
  the variable. A notebook with GPUs gets none (the device plugin's value must stand).
- ``CUDA_VISIBLE_DEVICES`` holds NVML's indices (PCI bus order): ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
  makes CUDA count the same way on a machine of mixed GPUs.
"""

from __future__ import annotations

import pytest
from jupyterhub.spawner import Spawner

from spawner.queueing import QueueingMixin


def env_for(monkeypatch, gpus: list[int], admin_env=None) -> dict:
    monkeypatch.setattr(Spawner, "get_env", lambda self: dict(admin_env or {}))
    s = QueueingMixin(computehub_url="http://hub:8081/services/computehub")
    s._admitted_w = {"placement": [{"node": "gpu-1", "gpus": gpus}]}
    return s.get_env()


def test_a_notebook_without_gpus_gets_none_from_the_runtime(monkeypatch):
    env = env_for(monkeypatch, [])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize("gpus", [[0], [2, 3]])
def test_a_notebook_with_gpus_leaves_them_to_the_device_plugin(monkeypatch, gpus):
    env = env_for(monkeypatch, gpus)
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, gpus)) and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_an_admins_own_value_stands(monkeypatch):
    env = env_for(monkeypatch, [], {"NVIDIA_VISIBLE_DEVICES": "none", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert env["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"      # the indices are NVML's whatever the config says
