"""Where quota is decided: the queue tree, its usage, guarantees, limits, borrowing, lending.

Only leaf queues hold workloads; a parent's usage is the sum of its subtree.

* ``limit``: a hard cap on a queue (and every ancestor); absent resource = no cap.
* ``guaranteed``: what the queue gets back, by preemption if need be, when it
  wants it. A parent's effective guarantee is at least the sum of its
  children's. GPUs are always governed (no guarantee = 0 guaranteed GPUs);
  CPU, memory and GPU flavors only when a queue names them.
* Borrowing: work beyond its queue's guarantee runs on idle capacity if its
  class and queue may borrow. ``lending_limit`` keeps ``guaranteed - lending_limit``
  of a queue's guarantee free for it even while idle; the lending check below
  makes sure borrowers never eat into that.
"""

from __future__ import annotations

from .errors import NotFound, ValidationError
from .model import QueueSpec
from .resources import GPU, add_into, is_flavor


def _with_flavor_total(vec: dict[str, int]) -> dict[str, int]:
    """A quota naming only flavors (``gpu:a100: 4``) implies that many GPUs in total."""
    flavors = sum(v for k, v in vec.items() if is_flavor(k))
    if flavors and GPU not in vec:
        vec = dict(vec)
        vec[GPU] = flavors
    return vec


class QueueTree:
    """Queue specs plus live usage per queue and per (queue, user)."""

    def managed_models(self) -> frozenset[str]:
        """GPU models some queue has a quota for (``gpu:a100`` in a guarantee, limit, lending
        limit, per-user limit or approval threshold). Their GPUs go only to work that asks for
        the model, so that the quota holds: work asking for any GPU never lands on them."""
        out = set()
        for s in self.specs.values():
            vecs = [s.guaranteed, s.limit, s.lending_limit, s.user_limit, s.approval_above,
                    *s.user_limits.values()]
            out.update(k[len("gpu:"):] for v in vecs if v for k in v if is_flavor(k))
        return frozenset(out)

    def __init__(self, specs: list[QueueSpec]):
        self.specs: dict[str, QueueSpec] = {s.name: s for s in specs}
        self.children: dict[str, list[str]] = {n: [] for n in self.specs}
        self.top: list[str] = []
        for s in specs:
            if s.parent is None:
                self.top.append(s.name)
            elif s.parent in self.specs:
                self.children[s.parent].append(s.name)
            else:
                raise ValidationError(f"queue {s.name!r} names unknown parent {s.parent!r}")
        self.chain: dict[str, tuple[str, ...]] = {}
        for name in self.specs:
            chain, seen, cur = [], set(), name
            while cur is not None:
                if cur in seen:
                    raise ValidationError(f"queue {name!r} is part of a cycle of parents")
                seen.add(cur)
                chain.append(cur)
                cur = self.specs[cur].parent
            self.chain[name] = tuple(chain)
        # Who may use each queue: its own groups, else its nearest ancestor's that names some
        # (a team's sub-queue made without groups is the team's, not everyone's); () = open.
        self.access: dict[str, tuple[str, ...]] = {
            name: next((tuple(self.specs[q].groups) for q in chain if self.specs[q].groups), ())
            for name, chain in self.chain.items()}
        self.guaranteed: dict[str, dict[str, int]] = {}
        for name in self._bottom_up():
            g = dict(_with_flavor_total(self.specs[name].guaranteed))
            total: dict[str, int] = {}
            for child in self.children[name]:
                add_into(total, self.guaranteed[child])
            for k, v in total.items():
                g[k] = max(g.get(k, 0), v)
            self.guaranteed[name] = g
        self.limit = {n: self.specs[n].limit for n in self.specs}
        # Keys a queue's quota speaks about (GPUs always).
        self.governed = {n: set(self.guaranteed[n]) | set(self.limit[n]) | {GPU} for n in self.specs}
        # Reserved = guarantee that may not be lent (guaranteed - lending_limit).
        self.reserved: dict[str, dict[str, int]] = {}
        for n, s in self.specs.items():
            if s.lending_limit is not None:
                r = {k: max(0, g - s.lending_limit.get(k, g)) for k, g in self.guaranteed[n].items()}
                self.reserved[n] = {k: v for k, v in r.items() if v > 0}
            else:
                self.reserved[n] = {}
        self.reserved_keys = sorted({k for r in self.reserved.values() for k in r})
        self._guaranteed_elsewhere: dict[str, bool] = {}    # borrows_only's memo (specs are fixed)
        self.usage: dict[str, dict[str, int]] = {n: {} for n in self.specs}
        self.user_usage: dict[tuple[str, str], dict[str, int]] = {}
        # Held by work that is being preempted: still allocated, but already on its way out.
        self.leaving: dict[str, dict[str, int]] = {n: {} for n in self.specs}
        self._eff: dict[str, dict[str, int]] = {}
        self._childsum: dict[str, dict[str, int]] = {}
        self._topsum: dict[str, int] = {}
        self._recompute_eff()

    def _bottom_up(self) -> list[str]:
        order: list[str] = []

        def visit(n):
            for c in self.children[n]:
                visit(c)
            order.append(n)

        for t in self.top:
            visit(t)
        return order

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)

    def borrows_only(self, queue: str, total: dict[str, int]) -> bool:
        """Does ``total`` need more GPUs than leaf ``queue``'s whole guarantee while GPUs are
        guaranteed to some queue outside its chain? Such work only ever runs on GPUs that other
        queues leave free (and may reclaim)."""
        need = total.get(GPU, 0)
        if need <= self.guaranteed[queue].get(GPU, 0):
            return False
        elsewhere = self._guaranteed_elsewhere.get(queue)
        if elsewhere is None:
            chain = self.chain[queue]
            elsewhere = self._guaranteed_elsewhere[queue] = any(
                g.get(GPU, 0) > 0 for q, g in self.guaranteed.items() if self.is_leaf(q) and q not in chain)
        return elsewhere

    def require_leaf(self, name: str) -> QueueSpec:
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(n for n in self.specs if self.is_leaf(n))) or "none"
            raise NotFound(f"unknown queue {name!r} (queues that take work: {known})")
        if not self.is_leaf(name):
            kids = ", ".join(self.children[name])
            raise ValidationError(f"queue {name!r} has sub-queues; submit to one of: {kids}")
        return spec

    # --- usage -------------------------------------------------------------

    def charge(self, queue: str, user: str, total: dict[str, int], sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) a workload's total from usage."""
        for q in self.chain[queue]:
            add_into(self.usage[q], total, sign)
        uu = self.user_usage.setdefault((queue, user), {})
        add_into(uu, total, sign)
        if self.reserved_keys:
            self._update_eff(queue)

    def mark_leaving(self, queue: str, total: dict[str, int], sign: int) -> None:
        for q in self.chain[queue]:
            add_into(self.leaving[q], total, sign)

    def _leaf_eff(self, q: str, usage: dict[str, int]) -> dict[str, int]:
        r = self.reserved[q]
        return {k: max(usage.get(k, 0), r.get(k, 0)) for k in self.reserved_keys}

    def _recompute_eff(self) -> None:
        self._topsum = {k: 0 for k in self.reserved_keys}
        for n in self._bottom_up():
            self._refresh(n)
        for t in self.top:
            for k in self.reserved_keys:
                self._topsum[k] += self._eff[t][k]

    def _refresh(self, n: str) -> None:
        if self.children[n]:
            cs = {k: sum(self._eff[c][k] for c in self.children[n]) for k in self.reserved_keys}
            self._childsum[n] = cs
            r = self.reserved[n]
            self._eff[n] = {k: max(cs[k], r.get(k, 0)) for k in self.reserved_keys}
        else:
            self._eff[n] = self._leaf_eff(n, self.usage[n])

    def _update_eff(self, leaf: str) -> None:
        for n in self.chain[leaf]:
            old = self._eff[n]
            self._refresh(n)
            if self.specs[n].parent is None:
                for k in self.reserved_keys:
                    self._topsum[k] += self._eff[n][k] - old[k]

    # --- checks ------------------------------------------------------------

    def over_limit(self, queue: str, total: dict[str, int]) -> tuple[str, str] | None:
        """(queue, resource) whose limit adding ``total`` would break, else None."""
        for q in self.chain[queue]:
            lim = self.limit[q]
            if lim:
                u = self.usage[q]
                for k, v in total.items():
                    if k in lim and u.get(k, 0) + v > lim[k]:
                        return q, k
        return None

    def over_user_limit(self, queue: str, user: str, total: dict[str, int]) -> str | None:
        lim = self.specs[queue].limit_for_user(user)
        if not lim:
            return None
        u = self.user_usage.get((queue, user), {})
        for k, v in total.items():
            if k in lim and u.get(k, 0) + v > lim[k]:
                return k
        return None

    def within_guarantee(self, queue: str, total: dict[str, int]) -> str | None:
        """None if ``total`` fits in the leaf's guarantee, else the first resource that does not."""
        g, u, gov = self.guaranteed[queue], self.usage[queue], self.governed[queue]
        for k, v in total.items():
            if k in gov and u.get(k, 0) + v > g.get(k, 0):
                return k
        return None

    def others_borrow(self, queue: str) -> bool:
        """Whether any leaf queue other than ``queue`` uses more than its guarantee now."""
        for q, g in self.guaranteed.items():
            if q == queue or not self.is_leaf(q) or self.specs[q].parent is None:
                continue
            u = self.usage[q]
            if any(u.get(k, 0) > g.get(k, 0) for k in self.governed[q] if k in u):
                return True
        return False

    def lending_blocks(self, queue: str, total: dict[str, int], capacity: dict[str, int]) -> str | None:
        """A resource on which admitting ``total`` would eat guarantee others keep unlent."""
        if not self.reserved_keys:
            return None
        keys = [k for k in self.reserved_keys if total.get(k)]
        if not keys:
            return None
        delta = {k: total[k] for k in keys}
        # Walk up the chain recomputing effective usage with the delta applied.
        prev_old = prev_new = None
        for n in self.chain[queue]:
            if prev_old is None:
                u = self.usage[n]
                new = {k: max(u.get(k, 0) + delta[k], self.reserved[n].get(k, 0)) for k in keys}
            else:
                cs = self._childsum[n]
                r = self.reserved[n]
                new = {k: max(cs[k] - prev_old[k] + prev_new[k], r.get(k, 0)) for k in keys}
            prev_old, prev_new = self._eff[n], new
        for k in keys:
            if self._topsum[k] - prev_old[k] + prev_new[k] > capacity.get(k, 0):
                return k
        return None

    def borrowing(self, queue: str, holds: dict[str, int], exclude_chain: tuple[str, ...] = ()) -> bool:
        """Is a queue on ``queue``'s chain (outside ``exclude_chain``) above its guarantee
        on a resource a workload holding ``holds`` uses? Such work is borrowed capacity."""
        for q in self.chain[queue]:
            if q in exclude_chain:
                break
            g, u, gov, gone = self.guaranteed[q], self.usage[q], self.governed[q], self.leaving[q]
            for k in holds:
                if k in gov and u.get(k, 0) - gone.get(k, 0) > g.get(k, 0):
                    return True
        return False
