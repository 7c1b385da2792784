"""Why a pending workload did not start this cycle, with the numbers behind it.

The engine records a ``Blocker`` per pending workload; ``explain`` turns it
into a sentence. Keeping numbers, not text, makes the cycle cheap and the
reason translatable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .arrays import cap_words
from .resources import fmt_amount, label

# Codes that more capacity (or preempting someone) could resolve.
CAPACITY = "capacity"
RESERVED = "reserved"
NO_NODE = "no_node"
QUEUE_LIMIT = "queue_limit"
USER_LIMIT = "user_limit"
GUARANTEE_ONLY = "guarantee_only"
NO_BORROW = "no_borrow"
LENDING = "lending"
STRICT_ORDER = "strict_order"
WAITING_PREEMPTION = "waiting_preemption"
MADE_ROOM = "made_room"
ARRAY_LIMIT = "array_limit"


@dataclass(slots=True)
class Blocker:
    code: str
    resource: str = ""
    queue: str = ""
    used: int = 0
    cap: int = 0
    need: int = 0
    other: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self, w=None, gap: float | None = None) -> str:
        """``gap`` (RESERVED only): seconds until the reservation's holder starts (explain.py); work
        declaring a limit no longer than that may start in the gap, and the sentence says how."""
        r, amt = self.resource, (lambda n: fmt_amount(self.resource, n))
        what = label(r) if r else ""
        if self.code == QUEUE_LIMIT:
            return (f"queue {self.queue} is at its limit: it uses {amt(self.used)}/{amt(self.cap)} {what} "
                    f"and this needs {amt(self.need)} more")
        if self.code == USER_LIMIT:
            return (f"your limit in queue {self.queue}: you use {amt(self.used)}/{amt(self.cap)} {what}; "
                    f"this needs {amt(self.need)} more")
        if self.code == GUARANTEE_ONLY:
            return (f"priority class {self.other} runs only inside guaranteed quota: queue {self.queue} "
                    f"uses {amt(self.used)}/{amt(self.cap)} guaranteed {what}; this needs {amt(self.need)}")
        if self.code == NO_BORROW:
            return (f"queue {self.queue} may not borrow: it uses {amt(self.used)}/{amt(self.cap)} "
                    f"guaranteed {what}; this needs {amt(self.need)}")
        if self.code == LENDING:
            return (f"needs {amt(self.need)} {what} beyond what is free to borrow: other queues keep "
                    f"their guaranteed share unlent ({amt(self.used)}/{amt(self.cap)} in use or kept)")
        if self.code == MADE_ROOM:
            return (f"stopped to give back capacity {self.queue} is owed; it starts again once "
                    f"{self.queue} workload {self.other} has started")
        if self.code == CAPACITY:
            return (f"needs {self.other}; no node has that free now "
                    f"(cluster uses {amt(self.used)}/{amt(self.cap)} {what})")
        if self.code == NO_NODE:
            return f"needs {self.other}; no healthy node could ever fit it"
        if self.code == RESERVED:
            held = f"capacity is held for {self.queue} workload {self.other}, which is ahead in line"
            if gap is None or gap < 60 or w is None or (w.time_limit is not None and w.time_limit <= gap):
                return f"{held} (declare a shorter --time limit to start in the gap)"
            span = minutes(gap)
            return (f"{held} and starts in {span}: with a time limit of at most {span} this could start in "
                    f"the gap (computehub update {w.id} --time {span} --test-only says)")
        if self.code == ARRAY_LIMIT:
            return cap_words(self.other, self.used, self.cap)
        if self.code == STRICT_ORDER:
            return f"waiting behind {self.other}, which is ahead in strict order"
        if self.code == WAITING_PREEMPTION:
            return (f"{self.need} workload(s) being stopped to make room (preempted or cancelled); "
                    "waiting for them to stop")
        return self.code


def minutes(seconds: float) -> str:
    """Whole minutes, rounded down, as ``--time`` takes them: ``45m``, ``2h``, ``1h40m``, ``3d4h``."""
    m = int(seconds // 60)
    d, h, m = m // 1440, m % 1440 // 60, m % 60
    return "".join(f"{n}{u}" for n, u in ((d, "d"), (h, "h"), (m, "m")) if n) or "0m"
