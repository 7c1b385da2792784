"""Resource vectors.

A resource vector is a plain ``dict[str, int]``: ``cpu`` in millicores,
``memory`` in bytes, ``gpu`` as a count, and GPU flavors such as ``gpu:a100``
(also a count). A workload asking for two A100s carries both ``gpu: 2`` and
``gpu:a100: 2`` so that quotas on "any GPU" and quotas per model both see it.

Plain dicts keep the hot loops of the engine cheap; the helpers here are the
only arithmetic the scheduler does on them.
"""

from __future__ import annotations

import math
import re

from .errors import ValidationError

CPU = "cpu"
MEMORY = "memory"
GPU = "gpu"
FLAVOR_PREFIX = "gpu:"

# Anything above these is a typo, not a request (1 PiB of memory, a million cores).
MAX_CPU_MILLICORES = 1_000_000 * 1000
MAX_MEMORY_BYTES = 1 << 50
MAX_GPUS = 100_000

_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_MEMORY_UNITS = {
    "": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_FLAVOR = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def flavor_key(model: str) -> str:
    """The resource name of one GPU model, e.g. ``gpu:a100``."""
    return FLAVOR_PREFIX + model


def is_flavor(name: str) -> bool:
    return name.startswith(FLAVOR_PREFIX)


def parse_cpu(value) -> int:
    """CPU in millicores from ``2``, ``0.5``, ``"500m"`` or ``"2"``."""
    if isinstance(value, bool):
        raise ValidationError(f"cpu must be a number of cores or millicores like '500m', not {value!r}")
    if isinstance(value, (int, float)):
        millis = value * 1000
    else:
        m = _QUANTITY.match(str(value))
        if not m or m.group(2) not in ("", "m"):
            raise ValidationError(f"cpu must look like '2', '0.5' or '500m', not {value!r}")
        millis = float(m.group(1)) * (1 if m.group(2) == "m" else 1000)
    if not math.isfinite(millis) or millis < 0:
        raise ValidationError(f"cpu must be a finite, non-negative amount (got {value!r})")
    if millis > MAX_CPU_MILLICORES:
        raise ValidationError(f"cpu {value!r} is absurdly large")
    return int(round(millis))


def parse_memory(value) -> int:
    """Memory in bytes from ``1073741824``, ``"4Gi"``, ``"512M"``."""
    if isinstance(value, bool):
        raise ValidationError(f"memory must be bytes or a size like '4Gi', not {value!r}")
    if isinstance(value, (int, float)):
        n = value
    else:
        m = _QUANTITY.match(str(value))
        if not m or m.group(2) not in _MEMORY_UNITS:
            raise ValidationError(f"memory must look like '4Gi', '512Mi' or a byte count, not {value!r}")
        n = float(m.group(1)) * _MEMORY_UNITS[m.group(2)]
    if not math.isfinite(n) or n < 0:
        raise ValidationError(f"memory must be a finite, non-negative size (got {value!r})")
    if n > MAX_MEMORY_BYTES:
        raise ValidationError(f"memory {value!r} is absurdly large")
    return int(n)


def parse_count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValidationError(f"{name} must be a whole number, not {value!r}")
    try:
        f = float(value)
    except ValueError:
        raise ValidationError(f"{name} must be a whole number, not {value!r}") from None
    if not math.isfinite(f):
        raise ValidationError(f"{name} must be a finite whole number, not {value!r}")
    if f != int(f):
        raise ValidationError(f"{name} must be a whole number, not {value!r}")
    n = int(f)
    if n < 0:
        raise ValidationError(f"{name} must not be negative (got {value!r})")
    if n > MAX_GPUS:
        raise ValidationError(f"{name} {value!r} is absurdly large")
    return n


def parse_vector(spec: dict | None, what: str = "resources", keep_zero: bool = False) -> dict[str, int]:
    """A resource vector from user input.

    Accepts ``cpu``, ``memory``, ``gpu`` and ``gpu:<model>`` keys. Zero entries
    are dropped unless ``keep_zero`` (a limit of 0 GPUs is not "no limit").
    Unknown names are refused rather than silently ignored.
    """
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ValidationError(f"{what} must be a mapping like {{'gpu': 2, 'cpu': '4'}}, not {spec!r}")
    out: dict[str, int] = {}
    for key, value in spec.items():
        if key == CPU:
            n = parse_cpu(value)
        elif key == MEMORY:
            n = parse_memory(value)
        elif key == GPU or (isinstance(key, str) and is_flavor(key)):
            if key != GPU and not _FLAVOR.match(key[len(FLAVOR_PREFIX):]):
                raise ValidationError(f"GPU flavor {key!r} must look like 'gpu:a100'")
            n = parse_count(f"{what}.{key}", value)
        else:
            raise ValidationError(
                f"unknown resource {key!r} in {what}; use cpu, memory, gpu or gpu:<model>")
        if n or keep_zero:
            out[key] = n
    return out


def render(vec: dict[str, int] | None) -> dict | None:
    """A vector as it is shown and stored: CPU as a millicore string ("4000m") so that
    reading a spec and writing it back never changes it."""
    if vec is None:
        return None
    return {k: (f"{v}m" if k == CPU else v) for k, v in vec.items()}


def add(a: dict[str, int], b: dict[str, int], times: int = 1) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v * times
    return out


def add_into(acc: dict[str, int], b: dict[str, int], times: int = 1) -> None:
    for k, v in b.items():
        acc[k] = acc.get(k, 0) + v * times


def scale(a: dict[str, int], times: int) -> dict[str, int]:
    return {k: v * times for k, v in a.items()}


def exceeds(usage: dict[str, int], cap: dict[str, int]) -> str | None:
    """The first resource named in ``cap`` on which ``usage`` is above it, else None."""
    for k, c in cap.items():
        if usage.get(k, 0) > c:
            return k
    return None


def fmt_amount(name: str, n: int) -> str:
    """A number a person reads: '4 cores', '16 GiB', '2'."""
    if name == CPU:
        return f"{n / 1000:g} cores" if n % 1000 == 0 else f"{n}m cpu"
    if name == MEMORY:
        return f"{n / 2**30:.4g} GiB"
    return str(n)


def label(name: str) -> str:
    """How a resource is named in a sentence: 'GPUs', 'a100 GPUs', 'CPU', 'memory'."""
    if name == GPU:
        return "GPUs"
    if is_flavor(name):
        return f"{name[len(FLAVOR_PREFIX):]} GPUs"
    return {"cpu": "CPU", "memory": "memory"}.get(name, name)
