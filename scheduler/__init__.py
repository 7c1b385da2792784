"""ComputeHub's scheduler core: queues, quotas, priorities, fair share, preemption,
gangs, backfill, placement, explanations, idle reclamation, ledger and events.

Pure Python plus SQLAlchemy; imports nothing from jupyterhub, kubernetes or
tornado, and is deterministic given (state, clock), so the live service and
trace replay run the same code.

    >>> from scheduler import Scheduler
    >>> s = Scheduler()                       # in memory; Scheduler(SqlStore(url)) for durable state
    >>> s.put_node({"name": "n1", "gpus": 8, "gpu_model": "a100", "cpu": 64, "memory": "512Gi"})
    >>> s.put_queue({"name": "team-a", "guaranteed": {"gpu": 4}})
    >>> w = s.submit({"user": "ada", "queue": "team-a", "kind": "training", "resources": {"gpu": 2}})
    >>> s.cycle().admitted[0].placement       # [Assignment(node='n1', gpus=(0, 1))]
"""

from .blockers import Blocker
from .engine import CycleResult, Engine, EngineConfig
from .errors import Conflict, NotFound, SchedulerError, StoreUnavailable, ValidationError
from .model import (Allocation, Assignment, Event, IdlePolicy, NodeSpec, PriorityClass, QueueSpec, Workload,
                    default_classes)
from .core import Scheduler
from .store import MemoryStore, Store, open_store

__all__ = [
    "Allocation", "Assignment", "Blocker", "Conflict", "CycleResult", "Engine", "EngineConfig", "Event",
    "IdlePolicy", "MemoryStore", "NodeSpec", "NotFound", "PriorityClass", "QueueSpec", "Scheduler",
    "SchedulerError", "Store", "StoreUnavailable", "ValidationError", "Workload", "default_classes", "open_store",
]
