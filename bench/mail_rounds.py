"""How fast the service's mailer (hub_ext/mail.py) follows the audit log and sends mail.

A scheduler on SQLite (a file, as the embedded default) runs N training jobs to their end; then
the mailer's rounds deliver their mails to a real SMTP server on 127.0.0.1 (aiosmtpd, as the
tests use). Side by side, on the same history: every job asked for a mail at its end, against
none did (the cost of following the log alone). Medians of --repeat runs; JSON under
bench/results/.

    python bench/mail_rounds.py --jobs 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from aiosmtpd.controller import Controller  # noqa: E402

from hub_ext.mail import SETTLE_S, Mail  # noqa: E402
from results_file import machine, save  # noqa: E402
from scheduler import Scheduler  # noqa: E402
from scheduler.store.sql import SqlStore  # noqa: E402


class Count:
    def __init__(self):
        self.n = 0

    async def handle_DATA(self, server, session, envelope):
        self.n += 1
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def history(path: Path, jobs: int, mail: bool) -> Scheduler:
    s = Scheduler(store=SqlStore(f"sqlite:///{path}"))
    s.put_node({"name": "n0", "gpus": 8, "cpu": 10_000, "memory": "4Ti"}, now=0)
    s.put_queue({"name": "a", "guaranteed": {"gpu": 8}}, now=0)
    spec = {"user": "ada", "queue": "a", "kind": "batch", "resources": {"gpu": 0, "cpu": "100m"}, "name": "job"}
    if mail:
        spec["mail"] = "end"
    ids = [w.id for w in s.submit_many([dict(spec) for _ in range(jobs)], now=1)]
    s.cycle(now=2)
    for wid in ids:
        s.mark_running(wid, now=3)
    for wid in ids:
        s.mark_finished(wid, now=4)
    return s


def one_run(jobs: int, mail: bool, port: int, inbox: Count) -> dict:
    with tempfile.TemporaryDirectory() as d:
        s = Scheduler(store=SqlStore(f"sqlite:///{Path(d) / 'db.sqlite'}"))
        mailer = Mail(smtp_host="127.0.0.1", smtp_port=port, mail_address="{user}@example.org")
        mailer.sched, mailer.log = s, logging.getLogger("bench")
        state = mailer._mail_state()          # from here on: what the history below adds
        s.store.close()
        sched = history(Path(d) / "db.sqlite", jobs, mail)
        mailer.sched = sched
        events = len(sched.store.get_events(after_id=state["after"]))
        before, rounds, sent = inbox.n, 0, 0
        t0 = time.perf_counter()
        while True:
            rounds += 1
            n = mailer.mail_round(state, now=4 + SETTLE_S + 1)
            sent += n
            if state["after"] >= sched.store.last_event_id():
                break
        seconds = time.perf_counter() - t0
        sched.store.close()
        assert inbox.n - before == sent == (jobs if mail else 0), (inbox.n, before, sent)
        return {"events": events, "mails": sent, "rounds": rounds, "seconds": seconds}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "mail_rounds.json"))
    a = ap.parse_args(argv)
    inbox = Count()
    port = free_port()
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    runs = {"mail": [], "none": []}
    try:
        for _ in range(a.repeat):          # alternating, so both see the same machine
            runs["mail"].append(one_run(a.jobs, True, port, inbox))
            runs["none"].append(one_run(a.jobs, False, port, inbox))
    finally:
        smtp.stop()
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    events = runs["mail"][0]["events"]
    print(f"{a.jobs} jobs ended ({events} audit events), {a.repeat} runs each, medians:")
    print(f"  each asked for mail at its end: {med['mail']:.3f} s for {a.jobs} mails "
          f"({a.jobs / med['mail']:.0f} mails/s, {1000 * med['mail'] / events:.3f} ms per event)")
    print(f"  none asked (the log followed):  {med['none']:.3f} s "
          f"({1000 * med['none'] / events:.3f} ms per event)")
    print(f"  ratio mail / none: {med['mail'] / med['none']:.1f}x")
    save({"machine": machine(), "jobs": a.jobs, "repeat": a.repeat, "runs": runs, "median_seconds": med},
         a.out)


if __name__ == "__main__":
    main()
