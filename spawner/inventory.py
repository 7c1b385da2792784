"""Inventory sources: what nodes and GPUs exist, as node specs for the scheduler.

``local_nodes()`` describes this machine: its GPUs from NVML (model, count,
memory), CPU and memory from the OS. With no GPU or no NVML driver it declares
a *simulated* node instead, labelled ``computehub/simulated=true`` so that every
view can say so.
"""

from __future__ import annotations

import logging
import os
import re
import socket

log = logging.getLogger(__name__)

SIMULATED_LABEL = "computehub/simulated"


def model_key(name: str) -> str:
    """'NVIDIA A100-SXM4-80GB' → 'a100', 'NVIDIA H100 80GB HBM3' → 'h100', 'Tesla T4' → 't4'."""
    n = name.lower().replace("nvidia", "").replace("tesla", "").replace("geforce", "").strip()
    m = re.search(r"([a-z]+\d+[a-z]*)", n)
    key = m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", n).strip("-")
    return key[:63] or "gpu"


def _host_resources() -> tuple[int, int]:
    cpu = (os.cpu_count() or 1) * 1000
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    return cpu, memory


def nvml_gpus() -> list[dict] | None:
    """One dict per GPU (index, model, memory bytes, uuid), or None when NVML is unusable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        log.info("NVML not available (%s): no real GPUs on this machine", e)
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
            uuid = pynvml.nvmlDeviceGetUUID(h)
            gpus.append({"index": i, "name": name, "model": model_key(name), "memory": int(mem),
                         "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid})
        return gpus
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def local_nodes(simulated_gpus: int = 4, simulated_model: str = "sim") -> list[dict]:
    """Node specs for this machine: real GPUs grouped by model, or one simulated node."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:40] or "local"
    cpu, memory = _host_resources()
    gpus = nvml_gpus()
    if not gpus:
        return [{"name": f"{host}-simulated", "gpus": simulated_gpus, "gpu_model": simulated_model,
                 "cpu": f"{cpu}m", "memory": memory, "labels": {SIMULATED_LABEL: "true"}}]
    by_model: dict[str, list[dict]] = {}
    for g in gpus:
        by_model.setdefault(g["model"], []).append(g)
    if len(by_model) == 1:
        model, gs = next(iter(by_model.items()))
        return [{"name": host, "gpus": len(gs), "gpu_model": model, "cpu": f"{cpu}m", "memory": memory,
                 "gpu_memory": gs[0]["memory"], "labels": {}}]
    # A scheduler node holds one GPU model: a mixed machine is one node per model.
    # (Their GPU indices are then local to each node; the launcher maps them back.)
    return [{"name": f"{host}-{model}", "gpus": len(gs), "gpu_model": model, "cpu": f"{cpu // len(by_model)}m",
             "memory": memory // len(by_model), "gpu_memory": gs[0]["memory"],
             "labels": {"computehub/gpu-indices": ",".join(str(g["index"]) for g in gs)}}
            for model, gs in sorted(by_model.items())]
