"""GPU utilisation from NVML, for deciding whether a notebook is idle.

The one place the reclaimer touches NVML, so tests replace it here. With no
NVML (no driver, no GPU) it answers ``None``: "unknown", never "idle".
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def utilisation(indices: list[int]) -> dict[int, float] | None:
    """Current utilisation in percent of each GPU index asked for, or None without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except ImportError:
        return None
    except Exception as e:      # pynvml.NVMLError and its subclasses, e.g. LibraryNotFound
        log.debug("NVML not available: %s", e)
        return None
    try:
        found = {}
        count = pynvml.nvmlDeviceGetCount()
        for i in indices:
            if 0 <= i < count:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                found[i] = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
        return found
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
