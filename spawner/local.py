"""The local twin of QueuedKubeSpawner: notebooks as local processes, queued by ComputeHub.

``QueuedLocalProcessSpawner`` runs each user's server as that OS user (like
JupyterHub's LocalProcessSpawner). ``QueuedSimpleLocalProcessSpawner`` runs it
as the hub's own OS user with a home under /tmp (JupyterHub's
SimpleLocalProcessSpawner: demos and tests only, no isolation between users).
Both get ``CUDA_VISIBLE_DEVICES`` from the GPU indices the scheduler assigned.
"""

from __future__ import annotations

from jupyterhub.spawner import LocalProcessSpawner, SimpleLocalProcessSpawner

from .queueing import QueueingMixin


class QueuedLocalProcessSpawner(QueueingMixin, LocalProcessSpawner):
    """A LocalProcessSpawner whose start waits for ComputeHub to admit a ``notebook`` workload."""


class QueuedSimpleLocalProcessSpawner(QueuedLocalProcessSpawner, SimpleLocalProcessSpawner):
    """QueuedLocalProcessSpawner without OS users (``make demo``, tests). Never in production."""
