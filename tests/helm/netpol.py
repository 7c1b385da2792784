"""Kubernetes NetworkPolicies, read the way the API defines them: whether a connection from one
endpoint to another is allowed by a set of policies (no CNI can run here to ask).

Semantics (networking.k8s.io/v1): a pod selected by no policy of a direction is open in that
direction; a pod selected by some is closed but for what the union of their rules allows. A
connection needs both the source's egress and the destination's ingress. A peer without a
namespaceSelector means the policy's own namespace; ``ipBlock`` is matched by address (as
Calico does for pod addresses too); a named port is the destination pod's container port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass
class Endpoint:
    """A pod (labels, namespace, IP, container ports by name) or, with ``pod=False``, an address
    outside the cluster."""

    labels: dict = field(default_factory=dict)
    namespace: str = ""
    ip: str = "10.1.2.3"
    ports: dict = field(default_factory=dict)
    pod: bool = True


def outside(ip: str) -> Endpoint:
    return Endpoint(ip=ip, pod=False)


def selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector: matchLabels and matchExpressions, all of them; {} selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _peer(peer: dict, ep: Endpoint, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        ip = ipaddress.ip_address(ep.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(x) for x in block.get("except") or [])
    if not ep.pod:
        return False
    if "namespaceSelector" in peer:
        in_ns = selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": ep.namespace})
    else:
        in_ns = ep.namespace == policy_ns
    return in_ns and selects(peer.get("podSelector"), ep.labels)


def _port(ports: list | None, dst: Endpoint, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        want = p.get("port")
        if want is None or want == port or (isinstance(want, str) and dst.ports.get(want) == port):
            return True
    return False


def _types(spec: dict) -> list[str]:
    """policyTypes, or as the API defaults them: Ingress, and Egress where egress rules are given."""
    return spec.get("policyTypes") or ["Ingress"] + (["Egress"] if "egress" in spec else [])


def _side(policies: list[dict], ep: Endpoint, other: Endpoint, dst: Endpoint, port: int, protocol: str,
          direction: str) -> bool:
    key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    mine = [p for p in policies if p["metadata"]["namespace"] == ep.namespace
            and direction in _types(p["spec"]) and selects(p["spec"]["podSelector"], ep.labels)]
    if not ep.pod or not mine:
        return True
    return any(_port(rule.get("ports"), dst, port, protocol)
               and (not rule.get(peers) or any(_peer(x, other, p["metadata"]["namespace"]) for x in rule[peers]))
               for p in mine for rule in p["spec"].get(key) or [])


def allowed(policies: list[dict], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether ``src`` may open a connection to ``dst`` on ``port`` under ``policies``."""
    return (_side(policies, src, dst, dst, port, protocol, "Egress")
            and _side(policies, dst, src, dst, port, protocol, "Ingress"))
