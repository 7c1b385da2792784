"""Checks that must hold after every cycle; tests and the crash-recovery check use them.

``violations(state)`` recomputes everything from the workloads themselves
(not from the incremental counters) and returns what is wrong, if anything.
"""

from __future__ import annotations

from .model import HOLDING, PENDING
from .resources import CPU, MEMORY, add_into


def violations(state, *, check_limits: bool = True) -> list[str]:
    out: list[str] = []
    gpus_used: dict[tuple[str, int], str] = {}
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    usage: dict[str, dict[str, int]] = {q: {} for q in state.tree.specs}
    user_usage: dict[tuple[str, str], dict[str, int]] = {}
    for w in state.workloads.values():
        if w.state == PENDING:
            if w.placement:
                out.append(f"{w.id} is pending but has a placement")
            continue
        if w.state not in HOLDING:
            continue
        if len(w.placement) != w.workers:
            out.append(f"{w.id}: gang of {w.workers} has {len(w.placement)} placed workers")
        for a in w.placement:
            node = state.inventory.nodes.get(a.node)
            if node is None:
                out.append(f"{w.id} placed on unknown node {a.node}")
                continue
            if len(a.gpus) != w.request.get("gpu", 0):
                out.append(f"{w.id} on {a.node} got {len(a.gpus)} GPUs, asked {w.request.get('gpu', 0)}")
            if w.gpu_model and node.spec.gpu_model != w.gpu_model:
                out.append(f"{w.id} wants {w.gpu_model} but {a.node} has {node.spec.gpu_model}")
            for g in a.gpus:
                if not 0 <= g < node.spec.gpus:
                    out.append(f"{w.id} holds GPU {g} that {a.node} does not have")
                other = gpus_used.get((a.node, g))
                if other is not None:
                    out.append(f"GPU {a.node}/{g} allocated twice: {other} and {w.id}")
                gpus_used[(a.node, g)] = w.id
            cpu[a.node] = cpu.get(a.node, 0) + w.request.get(CPU, 0)
            mem[a.node] = mem.get(a.node, 0) + w.request.get(MEMORY, 0)
        for q in state.tree.chain.get(w.queue, ()):
            add_into(usage[q], w.total)
        add_into(user_usage.setdefault((w.queue, w.user), {}), w.total)
    for name, c in cpu.items():
        spec = state.inventory.nodes[name].spec
        if c > spec.cpu or mem[name] > spec.memory:
            out.append(f"node {name} over-committed: cpu {c}/{spec.cpu}, memory {mem[name]}/{spec.memory}")
    for name, n in state.inventory.nodes.items():
        held = {g for (node, g) in gpus_used if node == name}
        if set(n.free_gpus) & held or len(n.free_gpus) + len(held) != n.spec.gpus:
            out.append(f"node {name}: free-GPU bookkeeping disagrees with allocations")
    for q, u in usage.items():
        tracked = {k: v for k, v in state.tree.usage[q].items() if v}
        if {k: v for k, v in u.items() if v} != tracked:
            out.append(f"queue {q}: usage bookkeeping {tracked} disagrees with allocations {u}")
        if check_limits:
            for k, lim in state.tree.limit[q].items():
                if u.get(k, 0) > lim:
                    out.append(f"queue {q} over its limit on {k}: {u[k]} > {lim}")
    if check_limits:
        for (q, user), u in user_usage.items():
            lim = state.tree.specs[q].limit_for_user(user)
            for k, v in lim.items():
                if u.get(k, 0) > v:
                    out.append(f"user {user} over their limit in {q} on {k}: {u[k]} > {v}")
    return out
