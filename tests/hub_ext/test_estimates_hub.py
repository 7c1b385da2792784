"""Start estimates are made off the service's event loop (hub_ext/estimates.py), through the
real hub, proxy and service (realhub.py; nothing emulated): while waiting work deep in a long
line has its ETA simulated, the service goes on answering everyone else; several asking about
waiting work at once are answered by one plan of the whole line, and two asking about the same
workload at once share one simulation."""

from __future__ import annotations

import threading
import time

from test_metrics_waiting import scrape, value

ESTIMATES = "computehub_start_estimate_duration_seconds"
PLANS = "computehub_line_plan_duration_seconds"
SIZES = (1, 2, 4)


def _long_line(hub) -> list[str]:
    """3,000 waiting tasks of mixed sizes and limits for three users (8 GPUs in all): an estimate
    deep in it simulates hundreds of completions."""
    deep = []
    for i in range(12):
        user = ("alice", "bob", "carol")[i % 3]
        r = hub.call("POST", "/workloads", hub.tokens[user], json={
            "queue": "nlp" if user == "carol" else "vision", "resources": {"gpu": SIZES[i % 3]},
            "time_limit": 300 * (1 + i % 7), "array": "0-249"})
        assert r.status_code == 201, r.text
        deep.append(r.json()["tasks"][-1])
    return deep


def _estimates(hub, name=ESTIMATES) -> tuple[float, float]:
    s = scrape(hub, hub.tokens["ada"])
    return value(s, name + "_count") or 0.0, value(s, name + "_sum") or 0.0


def _simulations(hub) -> tuple[float, float, float]:
    """(own estimates made, line plans made, seconds all of them took)."""
    (n, took), (plans, planned) = _estimates(hub), _estimates(hub, PLANS)
    return n, plans, took + planned


def test_the_service_answers_others_while_it_simulates_a_deep_start_estimate(fresh_hub):
    # Each explanation made again on each cycle (estimate_reuse 0): the second part counts them.
    fresh_hub.extra = "\nc.ComputeHubService.cycle_interval = 2.0\nc.ComputeHubService.estimate_reuse = 0\n"
    hub = fresh_hub.start()
    deep = _long_line(hub)[-4:]
    time.sleep(2.5)                              # a cycle has seen them all
    own0, plans0, sum0 = _simulations(hub)
    answers: dict[str, dict] = {}

    def ask(wid):
        r = hub.call("GET", f"/workloads/{wid}", hub.tokens["ada"])
        assert r.status_code == 200, r.text
        answers[wid] = r.json()

    askers = [threading.Thread(target=ask, args=(wid,)) for wid in deep]
    for t in askers:
        t.start()
    answered = []                                 # when each of a stream of small requests came back
    while any(t.is_alive() for t in askers):
        assert hub.call("GET", "/me", hub.tokens["alice"]).status_code == 200
        answered.append(time.monotonic())
    for t in askers:
        t.join()
    own, plans, total = _simulations(hub)
    # The first asked has its own estimate made, and a plan of the whole line follows it; the
    # others wait for the plan instead of one simulation each.
    assert (own - own0, plans - plans0) == (1, 1), (own0, own, plans0, plans)
    mean = (total - sum0) / 2
    for wid in deep:
        e = answers[wid]["explanation"]
        assert e["position"] > 200 and e["eta_reason"], e          # each one deep in line, estimated
    # Had the simulations run on the loop, the small requests would have stalled for as long as
    # each one took; off the loop they only share the core with it.
    assert mean > 0.1, f"the line is too short to test this: an estimate took {mean:.3f} s"
    gaps = [b - a for a, b in zip(answered, answered[1:])]
    assert len(answered) >= 5 and max(gaps) < mean / 2, (max(gaps), mean, len(answered))

    # Two asking about the same workload at once share one simulation.
    time.sleep(2.5)                              # a new cycle: the kept explanations are dropped
    count0, _ = _estimates(hub)
    both = [threading.Thread(target=ask, args=(deep[0],)) for _ in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join()
    assert _estimates(hub)[0] - count0 == 1
