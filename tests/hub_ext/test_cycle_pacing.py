"""The service's scheduling loop under a burst of changes, run in-process on a real SQLite
file: cycles are spaced so that they take at most ``cycle_max_busy`` of the service's time
(a cycle walks all pending work; without the spacing a long backlog turns every burst of
submissions into back-to-back cycles and the API stalls), a change after a quiet spell
still gets its cycle at once, and the spacing never exceeds ``cycle_interval``. The cycle
is slowed on purpose (a sleep around the real one) so the spacing is visible."""

import asyncio
import time

import pytest
from traitlets import TraitError

from hub_ext.app import ComputeHubService

CYCLE_S = 0.02


def service(tmp_path, **kw):
    svc = ComputeHubService(data_dir=str(tmp_path), service_prefix="/services/computehub/",
                            nodes=[{"name": "n0", "gpus": 8}], initial_queues=[{"name": "a"}],
                            cycle_delay=0.0, cycle_min_interval=0.0, **kw)
    svc.initialize([])
    starts = []
    real_cycle = svc.sched.cycle

    def slow_cycle(now):
        starts.append(time.monotonic())
        time.sleep(CYCLE_S)
        return real_cycle(now=now)

    svc.sched.cycle = slow_cycle
    return svc, starts


async def burst(svc, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        svc.changed()
        await asyncio.sleep(0.003)


def drive(svc, body):
    async def run():
        svc._changed, svc._wake = asyncio.Event(), asyncio.Event()
        loop = asyncio.create_task(svc.scheduling_loop())
        try:
            await body()
        finally:
            svc.stopping = True
            svc._wake.set()
            await asyncio.wait_for(loop, 5)
    asyncio.run(run())


def gaps(starts):
    return [b - a for a, b in zip(starts, starts[1:])]


def test_cycles_under_a_burst_take_at_most_their_share_and_a_lone_change_is_not_delayed(tmp_path):
    svc, starts = service(tmp_path, cycle_max_busy=0.25, cycle_interval=30.0)

    async def body():
        await burst(svc, 1.0)
        await asyncio.sleep(0.5)                 # quiet: longer than the spacing (~0.08 s)
        in_burst = len(starts)                   # the burst's last change has had its cycle
        # The spacing has passed: a change now waits for nothing (not the spacing, and not the
        # periodic cycle 30 s away). Timed loosely: a loaded 2-core machine may take a while
        # to run the loop's next step, which is not what this checks.
        assert svc.next_cycle_gap() <= 0, "a lone change after a quiet spell waits for no spacing"
        t = time.monotonic()
        svc.changed()
        for _ in range(200):
            if len(starts) > in_burst:
                break
            await asyncio.sleep(0.01)
        assert len(starts) == in_burst + 1, "a lone change after a quiet spell gets its cycle at once"
        assert starts[-1] - t < 2.0

    drive(svc, body)
    burst_gaps = gaps(starts[:-1])
    assert len(burst_gaps) >= 5
    # Each cycle took >= 20 ms, so the next began >= 80 ms after it (a share of 0.25).
    assert min(burst_gaps) >= CYCLE_S / 0.25 - 0.005, burst_gaps
    assert len(starts) - 1 <= 1.0 / (CYCLE_S / 0.25) + 2


def test_without_the_share_cycles_follow_each_other_and_the_spacing_stops_at_the_interval(tmp_path):
    svc, starts = service(tmp_path, cycle_max_busy=1.0, cycle_interval=30.0)
    drive(svc, lambda: burst(svc, 0.5))
    assert len(starts) >= 12, "a share of 1 lets cycles run back to back"      # ~20 at 20 ms + overhead

    svc2, starts2 = service(tmp_path / "capped", cycle_max_busy=0.001, cycle_interval=0.15)
    drive(svc2, lambda: burst(svc2, 0.8))
    # 20 ms / 0.001 would be 20 s; the spacing is cut to the periodic cycle_interval.
    assert len(starts2) >= 4 and max(gaps(starts2)) < 0.3, gaps(starts2)


@pytest.mark.parametrize("trait,bad,says", [
    ("cycle_max_busy", 0.0, "cycle_max_busy must be a share between 0 and 1"),
    ("cycle_max_busy", -0.1, "cycle_max_busy must be a share between 0 and 1"),
    ("cycle_max_busy", 1.5, "cycle_max_busy must be a share between 0 and 1"),
    ("long_poll_max", 31.0, "long_poll_max must be between 0 and 30 seconds"),
    ("long_poll_max", 0.0, "long_poll_max must be between 0 and 30 seconds")])
def test_timing_knobs_out_of_range_are_refused_with_their_name(trait, bad, says):
    with pytest.raises(TraitError, match=says):
        ComputeHubService(**{trait: bad})
    assert getattr(ComputeHubService(**{trait: 0.5}), trait) == 0.5


def test_work_with_a_begin_time_joins_the_line_then_not_at_the_next_periodic_cycle(tmp_path):
    svc, starts = service(tmp_path, cycle_interval=30.0)
    s = svc.sched

    async def body():
        begin = time.time() + 1.0
        w = s.submit({"user": "ada", "queue": "a", "resources": {"gpu": 1}, "time_limit": 60, "begin": begin})
        svc.changed()
        for _ in range(100):                     # its submission's own cycle: held until then
            if starts:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert s.get(w.id).state == "held" and svc.next_begin == begin
        assert 0 < svc.next_cycle_in() <= 1.0
        while s.get(w.id).state == "held" and time.time() < begin + 10:
            await asyncio.sleep(0.02)
        # Released by a cycle at its begin time (the periodic one is 30 s away), and started.
        assert s.get(w.id).state == "admitted" and time.time() - begin < 5, s.get(w.id)
        assert svc.next_begin is None and svc.next_cycle_in() == 30.0
        # A begin time a cycle has passed and not released (it cannot be) brings no cycles back to back.
        svc.next_begin = begin
        assert svc.next_cycle_in() == 30.0

    drive(svc, body)
