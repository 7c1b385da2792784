"""The service's group commit, driven in-process on a real SQLite file: submissions that
arrive while a batch is being written (on the writer thread) form the next batch, every
caller gets its own answer, and a write the database refuses fails its whole batch with a
503 and leaves nothing behind. (Through the hub and proxy the same path runs in test_flow,
test_service_crash and the API benchmark.)"""

import asyncio
import threading

import pytest

from hub_ext.app import ComputeHubService
from hub_ext.base import APIError
from scheduler.errors import SchedulerError


def service(tmp_path, **kw):
    svc = ComputeHubService(data_dir=str(tmp_path), service_prefix="/services/computehub/",
                            nodes=[{"name": "n0", "gpus": 8}], initial_queues=[{"name": "a"}], **kw)
    svc.initialize([])
    return svc


def spec(i, **kw):
    return {"user": "ada", "queue": "a", "name": f"job-{i}", "resources": {"gpu": 1}, **kw}


def test_submissions_during_a_write_form_the_next_batch(tmp_path):
    svc = service(tmp_path, write_on_thread=True)
    writes, release = [], threading.Event()
    real_write = svc.sched.write_submissions

    def slow_write(batch):          # the writer thread: hold the first commit until told
        writes.append(len(batch.accepted))
        if len(writes) == 1:
            assert release.wait(10)
        real_write(batch)

    svc.sched.write_submissions = slow_write

    async def run():
        first = [asyncio.ensure_future(svc.submit(spec(i))) for i in range(5)]
        while not writes:
            await asyncio.sleep(0.005)          # the loop stays free while the first batch is written
        second = [asyncio.ensure_future(svc.submit(spec(i))) for i in range(5, 15)]
        second.append(asyncio.ensure_future(svc.submit(spec(99, queue="nope"))))
        await asyncio.sleep(0.05)
        assert not any(f.done() for f in first + second)
        release.set()
        return await asyncio.gather(*first, *second, return_exceptions=True)

    *ok, bad = asyncio.run(run())
    assert writes == [5, 10]                    # two transactions, the second taking all that waited
    assert isinstance(bad, SchedulerError) and "nope" in str(bad)
    assert [w.name for w in ok] == [f"job-{i}" for i in range(15)] and len({w.id for w in ok}) == 15
    assert {w.id for w in svc.sched.store.get_workloads()} == {w.id for w in ok}
    assert all(w.id in svc.sched.state.pending for w in ok)


def test_writing_on_the_event_loop_still_groups(tmp_path):
    svc = service(tmp_path)                     # the default: written on the loop

    async def run():
        return await asyncio.gather(*(svc.submit(spec(i)) for i in range(20)))

    ok = asyncio.run(run())
    assert len({w.id for w in ok}) == 20 and len(svc.sched.store.get_workloads()) == 20
    kinds = [e.kind for e in svc.sched.store.get_events(kinds=("submitted",))]
    assert len(kinds) == 20


@pytest.mark.parametrize("on_thread", [False, True])
def test_a_refused_write_fails_its_batch_and_keeps_nothing(tmp_path, monkeypatch, on_thread):
    svc = service(tmp_path, write_on_thread=on_thread)
    first = asyncio.run(svc.submit(spec(0)))

    def disk_full(events):
        raise OSError("disk full")

    monkeypatch.setattr(svc.sched.store, "add_events", disk_full)

    async def burst():
        return await asyncio.gather(*(svc.submit(spec(i)) for i in range(1, 6)), return_exceptions=True)

    errors = asyncio.run(burst())
    assert all(isinstance(e, APIError) and e.status_code == 503 and "nothing was accepted" in e.message
               for e in errors), errors
    assert [w.id for w in svc.sched.store.get_workloads()] == [first.id]
    assert list(svc.sched.state.pending) == [first.id]
    monkeypatch.undo()
    again = asyncio.run(svc.submit(spec(7)))                      # the service goes on
    assert again.id != first.id and svc.sched.store.get_workload(again.id) is not None
