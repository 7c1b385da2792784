"""Local inventory from NVML. No GPU exists on the test machines: NVML is replaced at its
Python boundary (the ``pynvml`` module) by a fake that answers like a driver would."""

import sys
import types

import pytest

from scheduler import Scheduler
from spawner import inventory


class _Mem:
    def __init__(self, total):
        self.total = total


def fake_nvml(names, fail_init=False):
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    m.NVMLError = NVMLError
    m.nvmlInit = lambda: (_ for _ in ()).throw(NVMLError("Driver Not Loaded")) if fail_init else None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(names)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: names[h].encode()
    m.nvmlDeviceGetMemoryInfo = lambda h: _Mem(80 * 2**30)
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    return m


def test_real_pynvml_without_a_gpu_gives_a_labelled_simulated_node():
    nodes = inventory.local_nodes()           # the real nvidia-ml-py: no driver here
    assert len(nodes) == 1 and nodes[0]["labels"] == {"computehub/simulated": "true"}
    s = Scheduler()
    spec = s.put_node(nodes[0])               # a valid node for the scheduler
    assert spec.gpus == 4 and spec.gpu_model == "sim"


def test_driver_error_is_reported_as_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["x"], fail_init=True))
    assert inventory.nvml_gpus() is None
    assert inventory.local_nodes(simulated_gpus=2)[0]["gpus"] == 2


def test_gpus_become_one_node_per_model(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["NVIDIA A100-SXM4-80GB"] * 4))
    (node,) = inventory.local_nodes()
    assert node["gpus"] == 4 and node["gpu_model"] == "a100" and node["gpu_memory"] == 80 * 2**30
    assert "computehub/simulated" not in node["labels"]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA H100 80GB HBM3"]))
    nodes = {n["gpu_model"]: n for n in inventory.local_nodes()}
    assert nodes["h100"]["gpus"] == 2 and nodes["h100"]["labels"]["computehub/gpu-indices"] == "0,2"
    assert nodes["t4"]["gpus"] == 1
    s = Scheduler()
    for n in nodes.values():
        s.put_node(n)
    assert s.state.inventory.capacity["gpu:h100"] == 2


@pytest.mark.parametrize("name, key", [("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA H100 80GB HBM3", "h100"),
                                       ("Tesla V100-PCIE-16GB", "v100"), ("NVIDIA L4", "l4")])
def test_model_names(name, key):
    assert inventory.model_key(name) == key
