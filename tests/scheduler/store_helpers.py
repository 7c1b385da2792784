"""Small builders shared by the store tests."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from scheduler.model import PENDING, RUNNING, Assignment, Workload


def wl(i: int, state: str = PENDING, placement=(), **kw) -> Workload:
    d = dict(id=f"w{i}", seq=i, user=kw.pop("user", "alice"), queue=kw.pop("queue", "team-a"),
             kind="training", priority="training", request={"gpu": 2, "cpu": 4000},
             state=state, placement=[Assignment(n, tuple(g)) for n, g in placement],
             submitted_at=100.0 + i)
    d.update(kw)
    return Workload(**d)


def dump(ws):
    return [w.to_dict() for w in ws]


def snap(s):
    """A comparable form of ``load()``: specs sorted by name (MemoryStore keeps insertion order)."""
    sn = s.load()
    by_name = lambda xs: sorted((x.to_dict() for x in xs), key=lambda d: d["name"])  # noqa: E731
    return {"queues": by_name(sn.queues), "classes": by_name(sn.classes), "nodes": by_name(sn.nodes),
            "workloads": dump(sn.workloads), "fairshare_time": sn.fairshare_time,
            "fairshare": sn.fairshare, "next_seq": sn.next_seq}


def held(s, node: str, gpu: int) -> bool:
    """Whether (node, gpu) is held: try to take it with a probe workload, roll back either way."""
    class Probe(Exception):
        pass

    try:
        with s.transaction():
            s.put_workload(wl(99999, RUNNING, [(node, [gpu])]))
            raise Probe
    except Probe:
        return False
    except IntegrityError:
        return True
