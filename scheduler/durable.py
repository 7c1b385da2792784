"""How the ``Scheduler``'s memory stays what its store holds.

Every change goes through a store transaction (``_tx``), one per operation and one per
cycle; memory changes only inside it (a cycle decides inside it too), so a transaction that
cannot even begin (the database is down) leaves memory as it was. If one fails after it
began, memory is rebuilt from the store (``_load``); if the store cannot be read either,
memory is marked stale and every later operation first rebuilds it (``ensure_current``),
raising ``StoreUnavailable`` while it still cannot: memory never runs ahead of what is
durable, and nobody is shown a decision that was not made durable. Mixed into ``Scheduler``.
"""

from __future__ import annotations

import contextlib

from .engine import Engine
from .model import default_classes
from .state import ClusterState


class DurableMemory:
    """Needs ``store``, ``config``, ``_unapplied`` and ``_stale`` of the ``Scheduler``."""

    def _load(self) -> None:
        snap = self.store.load()
        if not snap.classes:
            with self.store.transaction():
                for pc in default_classes():
                    self.store.put_class(pc)
            snap.classes = default_classes()
        self.state = ClusterState(snap.queues, snap.classes, snap.nodes)
        for w in sorted(snap.workloads, key=lambda w: w.seq):
            self.state.add(w)
        self.engine = Engine(self.state, self.config)
        self.engine.fairshare.load(snap.fairshare_time, snap.fairshare)
        # Never lower: ids handed to a batch whose write failed are not handed out again.
        self.next_seq = max([snap.next_seq, getattr(self, "next_seq", 1)]
                            + [w.seq + 1 for w in self._unapplied.values()])
        self.last = None

    @property
    def stale(self) -> bool:
        """Whether memory may disagree with the store until ``ensure_current`` succeeds."""
        return self._stale

    def ensure_current(self) -> None:
        """Make sure memory is what the store holds: after a transaction failed while the store
        could not be read back, rebuild memory now. Raises ``StoreUnavailable`` while it still
        cannot (nothing is decided or shown on memory that may be wrong meanwhile)."""
        if self._stale:
            self._load()
            self._stale = False

    def _resync(self) -> None:
        """Memory may hold what a failed transaction changed: rebuild it from the store, or,
        if the store cannot be read now, mark it stale for ``ensure_current``."""
        try:
            self._load()
            self._stale = False
        except Exception:       # noqa: BLE001 - the original failure is what the caller sees
            self._stale = True

    @contextlib.contextmanager
    def _tx(self):
        """One store transaction. Change memory only inside it: on failure memory is rebuilt
        from the store (nothing to rebuild when the transaction could not even begin)."""
        self.ensure_current()
        began = False
        try:
            with self.store.transaction():
                began = True
                yield
        except BaseException:
            if began:
                self._resync()
            raise

    def batch(self):
        """Several operations (status reports) in one store transaction: one commit for all.
        If writing fails, memory is rebuilt from the store and none of them happened."""
        return self._tx()
