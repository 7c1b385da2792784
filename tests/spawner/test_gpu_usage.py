"""GPU utilisation for idle decisions, with NVML replaced at its boundary (no GPU here)."""

from __future__ import annotations

import types

import pynvml

from spawner import gpu_usage
from spawner.notebook_watch import NotebookWatch


def fake_nvml(monkeypatch, utils: list[int]):
    """Two-function-deep stand-in for the NVML library: a machine with these GPU utilisations."""
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(utils))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates",
                        lambda h: types.SimpleNamespace(gpu=utils[h], memory=0))


def test_no_nvml_means_unknown_not_idle():
    # This machine has no NVIDIA driver: the real pynvml fails to load its library.
    assert gpu_usage.utilisation([0]) is None
    watch = NotebookWatch(computehub_url="http://x", api_token="t")
    assert watch.gpus_busy({"placement": [{"node": "n", "gpus": [0]}]}) is None


def test_utilisation_of_the_assigned_gpus_only(monkeypatch):
    fake_nvml(monkeypatch, [0, 80, 3])
    assert gpu_usage.utilisation([0, 2, 7]) == {0: 0.0, 2: 3.0}     # 7 does not exist here


def test_a_busy_gpu_keeps_its_notebook_active(monkeypatch):
    fake_nvml(monkeypatch, [0, 80])
    watch = NotebookWatch(computehub_url="http://x", api_token="t", gpu_busy_percent=5)
    assert watch.gpus_busy({"placement": [{"node": "n", "gpus": [1]}]}) is True
    assert watch.gpus_busy({"placement": [{"node": "n", "gpus": [0]}]}) is False
    assert watch.gpus_busy({"placement": []}) is None
