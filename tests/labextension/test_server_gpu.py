"""The server extension's GPU endpoint, through a real jupyter_server (pytest-jupyter).

Emulated: the GPUs. NVML is replaced only at its boundary: the ``pynvml``
functions the extension calls are monkeypatched to describe two A100s; the
"no GPU" case raises NVML's own NVMLError_LibraryNotFound, as on a machine
without a driver. Everything above NVML (reader, handler, auth) is real.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pynvml
import pytest
from tornado.httpclient import HTTPClientError
from traitlets.config import Config

GiB = 2**30


@pytest.fixture
def jp_server_config():
    return Config({"ServerApp": {"jpserver_extensions": {"labextension": True}},
                   "ComputeHubLab": {"gpu_sample_gap": 0.0}})


class FakeNVML:
    """Two GPUs as NVML describes them; ``util`` changes between reads."""

    def __init__(self):
        self.gpus = [
            {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa1111-0000", "util": 63, "used": 12 * GiB,
             "total": 80 * GiB, "temp": 54, "power": 210_500, "procs": [(4242, 11 * GiB)]},
            {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-bbbb2222-0000", "util": 5, "used": 1 * GiB,
             "total": 80 * GiB, "temp": 41, "power": 61_000, "procs": []},
        ]
        self.inits = 0

    def install(self, mp):
        def not_supported(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def init():
            self.inits += 1

        g = self.gpus
        mp.setattr(pynvml, "nvmlInit", init)
        mp.setattr(pynvml, "nvmlShutdown", lambda: None)
        mp.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(g))
        mp.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
        mp.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: g[h]["uuid"])
        mp.setattr(pynvml, "nvmlDeviceGetName", lambda h: g[h]["name"])
        mp.setattr(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=g[h]["util"], memory=0))
        mp.setattr(pynvml, "nvmlDeviceGetMemoryInfo",
                   lambda h: SimpleNamespace(used=g[h]["used"], total=g[h]["total"], free=g[h]["total"] - g[h]["used"]))
        mp.setattr(pynvml, "nvmlDeviceGetTemperature", lambda h, sensor: g[h]["temp"])
        mp.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: g[h]["power"])
        mp.setattr(pynvml, "nvmlDeviceGetEnforcedPowerLimit", not_supported)   # some boards say so
        mp.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses",
                   lambda h: [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g[h]["procs"]])


@pytest.fixture
def nvml(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = FakeNVML()
    fake.install(monkeypatch)
    return fake


async def get_gpu(jp_fetch):
    r = await jp_fetch("computehub", "gpu")
    assert r.code == 200
    return json.loads(r.body)


async def test_all_gpus_with_metrics_and_processes(jp_fetch, nvml):
    body = await get_gpu(jp_fetch)
    assert body["available"] is True
    d0, d1 = body["devices"]
    assert d0 == {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa1111-0000", "utilization": 63,
                  "memory_used": 12 * GiB, "memory_total": 80 * GiB, "temperature": 54, "power_watts": 210.5,
                  "power_limit_watts": None, "processes": [{"pid": 4242, "used_memory": 11 * GiB}],
                  "history": [63]}
    assert d1["index"] == 1 and d1["utilization"] == 5 and d1["processes"] == []


async def test_history_grows_for_the_sparkline(jp_fetch, nvml):
    for util in (10, 40, 90):
        nvml.gpus[0]["util"] = util
        body = await get_gpu(jp_fetch)
    assert body["devices"][0]["history"] == [10, 40, 90]
    assert body["devices"][1]["history"] == [5, 5, 5]


@pytest.mark.parametrize("cvd, expected", [
    ("1", [1]),
    ("1,0", [1, 0]),                      # CUDA's order, not NVML's
    ("GPU-bbbb2222", [1]),                # a UUID prefix, as CUDA accepts
    ("0,7,1", [0]),                       # CUDA stops at the first GPU it cannot resolve
])
async def test_cuda_visible_devices_is_honoured(jp_fetch, nvml, monkeypatch, cvd, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    body = await get_gpu(jp_fetch)
    assert [d["index"] for d in body["devices"]] == expected


@pytest.mark.parametrize("cvd", ["", "-1"])
async def test_hidden_gpus_say_so(jp_fetch, nvml, monkeypatch, cvd):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    body = await get_gpu(jp_fetch)
    assert body == {"available": False, "devices": [],
                    "reason": "CUDA_VISIBLE_DEVICES hides every GPU from this server"}


async def test_no_nvml_library_is_a_clear_state_not_an_error(jp_fetch, monkeypatch):
    def missing():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    body = await get_gpu(jp_fetch)
    assert body == {"available": False, "devices": [],
                    "reason": "NVML library not found: no NVIDIA driver on this machine"}


async def test_needs_the_servers_auth(jp_fetch, nvml):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("computehub", "gpu", headers={"Authorization": ""})
    assert e.value.code == 403


def test_many_readers_do_not_speed_up_the_history(nvml):
    """Several open tabs poll more often than one: the history keeps one sample per gap."""
    from labextension.gpu import GPUReader

    reader = GPUReader(history=5, min_gap=3600.0)
    for util in (10, 20, 30):
        nvml.gpus[0]["util"] = util
        body = reader.read()
    assert body["devices"][0]["utilization"] == 30      # the reading itself is current
    assert body["devices"][0]["history"] == [10]         # the sparkline waits for the gap
    fast = GPUReader(history=2, min_gap=0.0)
    for util in (10, 20, 30):
        nvml.gpus[0]["util"] = util
        body = fast.read()
    assert body["devices"][0]["history"] == [20, 30]     # bounded
