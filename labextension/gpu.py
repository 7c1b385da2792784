"""This server's GPUs through NVML (``pynvml`` from nvidia-ml-py), as JSON.

Only the GPUs the server may use are shown: ``CUDA_VISIBLE_DEVICES`` (indices or
UUIDs, as CUDA reads it) filters NVML's list, which always has every GPU of the
machine. No NVML library, no driver, or no visible GPU gives
``{"available": false, "reason": ..., "devices": []}``, never an error.
"""

from __future__ import annotations

import collections
import os
import threading
import time

try:
    import pynvml
except ImportError:   # nvidia-ml-py is a dependency of the lab extra; say so instead of failing
    pynvml = None

HISTORY = 60          # utilisation samples kept per GPU for the sparkline


def visible_selectors(env=None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of indices or UUIDs; None = unset (all GPUs).
    CUDA stops at the first invalid entry; "" or "-1" hides every GPU."""
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out = []
    for part in raw.split(","):
        part = part.strip()
        if not part or part.startswith("-") or part.lower() == "nodevfiles":
            break
        out.append(part)
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class GPUReader:
    """Reads NVML on demand and keeps a short utilisation history per GPU (by UUID)."""

    def __init__(self, history: int = HISTORY, min_gap: float = 1.0):
        self._lock = threading.Lock()
        self._initialised = False
        self.history: dict[str, collections.deque] = {}
        self._sampled: dict[str, float] = {}
        self.size = history
        self.min_gap = min_gap   # seconds; several open tabs must not speed up the sparkline

    def _init(self) -> None:
        if not self._initialised:
            pynvml.nvmlInit()
            self._initialised = True

    def shutdown(self) -> None:
        with self._lock:
            if self._initialised:
                try:
                    pynvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 - shutting down; nothing to report to
                    pass
                self._initialised = False

    def _handles(self):
        """(index, handle, uuid) of the visible GPUs, in CUDA's order."""
        count = pynvml.nvmlDeviceGetCount()
        every = []
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            every.append((i, h, _text(pynvml.nvmlDeviceGetUUID(h))))
        wanted = visible_selectors()
        if wanted is None:
            return every
        out = []
        for sel in wanted:
            if sel.isdigit():
                match = [g for g in every if g[0] == int(sel)]
            else:   # a UUID or a unique prefix of one, as CUDA accepts
                match = [g for g in every if g[2].startswith(sel if sel.startswith("GPU-") else "GPU-" + sel)]
            if len(match) != 1:
                break   # CUDA ignores everything from the first entry it cannot resolve
            if match[0] not in out:
                out.append(match[0])
        return out

    def read(self) -> dict:
        if pynvml is None:
            return {"available": False, "reason": "nvidia-ml-py is not installed", "devices": []}
        with self._lock:
            try:
                self._init()
                handles = self._handles()
                devices = [self._device(i, h, uuid) for i, h, uuid in handles]
            except pynvml.NVMLError as e:
                self._initialised = False
                return {"available": False, "reason": _no_gpu_reason(e), "devices": []}
        if not devices:
            cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
            why = ("CUDA_VISIBLE_DEVICES hides every GPU from this server" if cvd is not None
                   else "NVML lists no GPU on this machine")
            return {"available": False, "reason": why, "devices": []}
        return {"available": True, "devices": devices}

    def _device(self, index: int, h, uuid: str) -> dict:
        def opt(fn, *args):
            try:
                return fn(h, *args)
            except pynvml.NVMLError:   # e.g. NVMLError_NotSupported on some boards
                return None

        util = opt(pynvml.nvmlDeviceGetUtilizationRates)
        mem = opt(pynvml.nvmlDeviceGetMemoryInfo)
        power = opt(pynvml.nvmlDeviceGetPowerUsage)            # milliwatts
        limit = opt(pynvml.nvmlDeviceGetEnforcedPowerLimit)    # milliwatts
        procs = opt(pynvml.nvmlDeviceGetComputeRunningProcesses) or []
        gpu_util = None if util is None else int(util.gpu)
        hist = self.history.setdefault(uuid, collections.deque(maxlen=self.size))
        now = time.monotonic()
        if gpu_util is not None and now - self._sampled.get(uuid, -1e9) >= self.min_gap:
            hist.append(gpu_util)
            self._sampled[uuid] = now
        return {
            "index": index,
            "name": _text(pynvml.nvmlDeviceGetName(h)),
            "uuid": uuid,
            "utilization": gpu_util,
            "memory_used": None if mem is None else int(mem.used),
            "memory_total": None if mem is None else int(mem.total),
            "temperature": opt(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
            "power_watts": None if power is None else power / 1000,
            "power_limit_watts": None if limit is None else limit / 1000,
            "processes": [{"pid": int(p.pid), "used_memory": _used_memory(p)} for p in procs],
            "history": list(hist),
        }


def _used_memory(p):
    v = getattr(p, "usedGpuMemory", None)
    # NVML reports "not available" (e.g. without the right privileges) as a huge sentinel or None.
    return None if v is None or v >= 2**63 else int(v)


def _no_gpu_reason(e) -> str:
    name = type(e).__name__
    if "LibraryNotFound" in name:
        return "NVML library not found: no NVIDIA driver on this machine"
    if "DriverNotLoaded" in name:
        return "the NVIDIA driver is not loaded"
    if "NoPermission" in name:
        return "no permission to read the GPUs through NVML"
    return f"NVML error: {e}"
