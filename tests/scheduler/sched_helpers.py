"""Small builders shared by the scheduler tests."""

from scheduler import EngineConfig, Scheduler


def cluster(nodes=2, gpus=8, model=None, queues=None, release=True, **cfg) -> Scheduler:
    """A scheduler with ``nodes`` identical nodes and an org → team queue tree."""
    s = Scheduler(config=EngineConfig(release_on_preempt=release, **cfg))
    for i in range(nodes):
        s.put_node({"name": f"n{i}", "gpus": gpus, "gpu_model": model, "cpu": 64, "memory": "512Gi"}, now=0)
    s.put_queue({"name": "org"}, now=0)
    for q in queues or [{"name": "a", "guaranteed": {"gpu": nodes * gpus // 2}},
                        {"name": "b", "guaranteed": {"gpu": nodes * gpus // 2}}]:
        s.put_queue({"parent": "org", **q}, now=0)
    return s


def job(s, queue="a", user="ada", gpus=1, kind="training", now=0, **extra):
    spec = {"user": user, "queue": queue, "kind": kind, "resources": {"gpu": gpus}, **extra}
    return s.submit(spec, now=now)


def one_job_per_node(s, queue, user, sizes, now=0):
    """Jobs of ``sizes`` for ``queue`` placed best-fit in one cycle, then every second one (the
    fillers) ends: the kept ones, one per node when the sizes pair up to a node each."""
    placed = [job(s, queue, user=user, gpus=g, now=now) for g in sizes]
    s.cycle(now=now)
    for filler in placed[1::2]:
        s.mark_finished(filler.id, now=now + 5)
    return placed[0::2]
