"""The local twin of QueuedKubeSpawner: notebooks as local processes, queued by ComputeHub.

``QueuedLocalProcessSpawner`` runs each user's server as that OS user (like
JupyterHub's LocalProcessSpawner), never as root or another system account: a hub
user named like one (an OAuth login "root", "daemon", "nobody") is refused, as the
local launcher refuses their jobs. ``QueuedSimpleLocalProcessSpawner`` runs it
as the hub's own OS user with a home under /tmp (JupyterHub's
SimpleLocalProcessSpawner: demos and tests only, no isolation between users).
Both get ``CUDA_VISIBLE_DEVICES`` from the GPU indices the scheduler assigned.
"""

from __future__ import annotations

import pwd

from jupyterhub.spawner import LocalProcessSpawner, SimpleLocalProcessSpawner
from traitlets import Integer

from .queueing import QueueingMixin


class QueuedLocalProcessSpawner(QueueingMixin, LocalProcessSpawner):
    """A LocalProcessSpawner whose start waits for ComputeHub to admit a ``notebook`` workload."""

    min_uid = Integer(1000, config=True, help="""OS accounts below this uid (root, system accounts)
        never run notebook servers: a hub user named like one is refused before anything is queued.""")
    max_uid = Integer(60000, config=True, help="""Nor accounts above this uid: 65534 is 'nobody', and
        Debian, Ubuntu and RHEL give people accounts up to 60000 (UID_MAX in /etc/login.defs).""")

    def check_can_start(self) -> None:
        try:
            uid = pwd.getpwnam(self.user.name).pw_uid
        except KeyError:
            return          # LocalProcessSpawner says the user has no account
        if not self.min_uid <= uid <= self.max_uid:
            raise RuntimeError(f"{self.user.name!r} is a system account on this machine (uid {uid}, outside "
                               f"{self.min_uid}-{self.max_uid}); notebook servers do not run as such accounts")


class QueuedSimpleLocalProcessSpawner(QueuedLocalProcessSpawner, SimpleLocalProcessSpawner):
    """QueuedLocalProcessSpawner without OS users (``make demo``, tests). Never in production."""

    def check_can_start(self) -> None:
        pass            # the server runs as the hub's own user, whatever the hub user is called
