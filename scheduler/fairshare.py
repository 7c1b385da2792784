"""Where fair share is computed: decayed usage per queue and per user.

Usage is resource-seconds that decay with a half-life (Slurm's
PriorityDecayHalfLife), integrated exactly between updates. A queue's share
is its dominant share (the largest fraction of any cluster resource its
decayed usage amounts to) divided by its weight; less share goes first.
"""

from __future__ import annotations

import math

from .resources import CPU, GPU, MEMORY

KEYS = (GPU, CPU, MEMORY)


class FairShare:
    def __init__(self, half_life: float):
        self.half_life = float(half_life)
        self.time: float | None = None
        # "queue" or "queue/user" -> resource -> decayed resource-seconds
        self.usage: dict[str, dict[str, float]] = {}

    def load(self, time: float | None, usage: dict[str, dict[str, float]]) -> None:
        self.time = time
        self.usage = {k: dict(v) for k, v in usage.items()}

    def advance(self, now: float, tree) -> None:
        """Decay stored usage to ``now`` and add what is allocated now (the queue tree's
        live usage per leaf queue and per queue/user) over the time since the last update."""
        if self.time is None or now <= self.time:
            self.time = now if self.time is None else self.time
            return
        dt = now - self.time
        factor = 0.5 ** (dt / self.half_life)
        # Exact integral of a constant allocation under exponential decay over dt.
        weight = (1.0 - factor) * self.half_life / math.log(2)
        for vec in self.usage.values():
            for k in vec:
                vec[k] *= factor
        live = [(q, tree.usage[q]) for q in tree.specs if tree.is_leaf(q)]
        live += [(q + "/" + u, vec) for (q, u), vec in tree.user_usage.items()]
        for key, alloc in live:
            vec = None
            for k in KEYS:
                v = alloc.get(k)
                if v:
                    if vec is None:
                        vec = self.usage.setdefault(key, {})
                    vec[k] = vec.get(k, 0.0) + v * weight
        self.time = now

    def share(self, key: str, capacity: dict[str, int], weight: float = 1.0) -> float:
        vec = self.usage.get(key)
        if not vec:
            return 0.0
        best = 0.0
        for k, v in vec.items():
            cap = capacity.get(k)
            if cap:
                best = max(best, v / cap)
        return best / self.half_life / (weight or 1.0)

    def snapshot(self) -> dict[str, dict[str, float]]:
        # Tiny residues are noise; dropping them keeps the stored row small.
        return {k: {r: v for r, v in vec.items() if v > 1e-9} for k, vec in self.usage.items()
                if any(v > 1e-9 for v in vec.values())}
