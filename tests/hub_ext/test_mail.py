"""Mail to a job's owner (hub_ext/mail.py): the mailer's rounds against a real SMTP server
(aiosmtpd on 127.0.0.1) and a real database (SQLite, PostgreSQL), the scheduler driven by
hand with its clock. Nothing is emulated; the service's loop around the rounds and the API's
side are in test_mail_hub.py."""

from __future__ import annotations

import email
import email.policy
import logging
import socket
import sys
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller

from hub_ext.mail import Mail
from scheduler import Scheduler
from scheduler.errors import ValidationError
from scheduler.store.sql import SqlStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))
from sched_helpers import cluster, job  # noqa: E402


class Inbox:
    """aiosmtpd's handler: every mail it accepts, parsed."""

    def __init__(self):
        self.mails: list[email.message.Message] = []
        self.refuse: set[str] = set()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.refuse:
            return "550 no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.mails.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 Message accepted"

    def subjects(self) -> list[str]:
        return [m["Subject"] for m in self.mails]


def free_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def mail_config(port: int, **more: str) -> str:
    """The service's config lines for mail through the SMTP server on ``port`` (hub tests)."""
    lines = {"smtp_host": '"127.0.0.1"', "smtp_port": str(port), "mail_address": '"{user}@example.org"',
             "mail_interval": "0.5", **more}
    return "".join(f"\nc.ComputeHubService.{k} = {v}" for k, v in lines.items()) + "\n"


@pytest.fixture
def smtp():
    inbox = Inbox()
    c = Controller(inbox, hostname="127.0.0.1", port=free_port())
    c.start()
    inbox.controller = c
    yield inbox
    inbox.controller.stop()


class Mailer(Mail):
    def __init__(self, sched, port, **kw):
        super().__init__(smtp_host="127.0.0.1", smtp_port=port, mail_address="{user}@example.org",
                         mail_link="https://hub.example.org/services/computehub/", **kw)
        self.sched = sched
        self.log = logging.getLogger("test-mail")
        self.state = self._mail_state()

    def round(self, now) -> int:
        return self.mail_round(self.state, now=now)


def sched_on(url) -> Scheduler:
    s = cluster(nodes=1, gpus=8)
    durable = Scheduler(store=SqlStore(url), config=s.config)
    durable.put_node({"name": "n0", "gpus": 8, "cpu": 64, "memory": "512Gi"}, now=0)
    durable.put_queue({"name": "org"}, now=0)
    durable.put_queue({"name": "a", "parent": "org", "guaranteed": {"gpu": 8}}, now=0)
    return durable


def test_a_job_mails_what_it_asked_for_and_nothing_else(store_url, smtp):
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port)
    quiet = job(s, queue="a", name="quiet", now=1)                       # asked for nothing
    w = job(s, queue="a", name="train", now=1, mail="end,fail")
    s.cycle(now=2)
    s.mark_running(w.id, now=3)
    s.mark_running(quiet.id, now=3)
    assert m.round(now=20) == 0                                         # it started: no begin asked
    s.mark_finished(w.id, now=30, exit_code=0)
    s.mark_finished(quiet.id, now=30, exit_code=1, reason="exit code 1")
    assert m.round(now=31) == 0                                         # younger than 5 s: next round
    assert m.round(now=40) == 1
    (mail,) = smtp.mails
    assert mail["Subject"] == f"[ComputeHub] train ({w.id}) finished"
    assert mail["To"] == "ada@example.org" and mail["Auto-Submitted"] == "auto-generated"
    body = mail.get_content()
    assert f"your training job train ({w.id}) finished at 1970-01-01 00:00:30 UTC" in " ".join(body.split())
    assert f"computehub logs {w.id}" in body and "https://hub.example.org/services/computehub/" in body
    assert "(mail: end, fail)" in body
    assert "  queue:      a, 1 GPU" in body.splitlines() and "ended:      1970-01-01 00:00:30 UTC (ran 27 s)" in body
    assert m.round(now=50) == 0 and len(smtp.mails) == 1                # never twice


def test_begin_fail_and_requeue(store_url, smtp):
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port)
    w = job(s, queue="a", name="sweep", now=1, mail=["all"])
    f = job(s, queue="a", name="oom", now=1, mail=["fail"])
    s.cycle(now=2)
    s.mark_running(w.id, now=3)
    s.mark_running(f.id, now=3)
    s.mark_finished(f.id, now=4, exit_code=3, reason="exit code 3: out of memory")
    s.mark_finished(w.id, now=5, exit_code=1, node_lost=True, reason="node n0 lost")   # requeued
    assert m.round(now=20) == 3
    assert smtp.subjects() == [f"[ComputeHub] sweep ({w.id}) started",
                               f"[ComputeHub] oom ({f.id}) failed (exit code 3)",
                               f"[ComputeHub] sweep ({w.id}) is back in line"]
    assert "why:        exit code 3: out of memory" in smtp.mails[1].get_content()


def running_array(store_url, smtp, mail: str):
    """A job array "grid" of three tasks asking for ``mail``, all running: (scheduler, mailer, tasks)."""
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port)
    tasks = job(s, queue="a", name="grid", now=1, array="0-2", mail=mail)
    s.cycle(now=2)
    for t in tasks:
        s.mark_running(t.id, now=3)
    return s, m, tasks


def test_a_job_array_mails_once_when_its_first_task_starts_and_once_when_all_have_ended(store_url, smtp):
    s, m, tasks = running_array(store_url, smtp, "begin,end")
    s.mark_finished(tasks[0].id, now=4)
    assert m.round(now=20) == 1                                         # one begin, not three
    s.mark_finished(tasks[1].id, now=21, exit_code=2, reason="exit code 2")
    assert m.round(now=30) == 0                                         # one task still runs
    s.mark_finished(tasks[2].id, now=31)
    assert m.round(now=40) == 1
    assert smtp.subjects() == [f"[ComputeHub] job array grid {tasks[0].id} started",
                               f"[ComputeHub] job array grid {tasks[0].id} ended (1 failed, 2 finished)"]
    assert f"computehub jobs --array {tasks[0].id}" in smtp.mails[1].get_content()
    assert "all its 3 tasks have ended, the last at 1970-01-01 00:00:31 UTC: 1 failed, 2 finished" in \
        " ".join(smtp.mails[1].get_content().split())
    assert m.round(now=50) == 0


def test_a_job_arrays_requeued_tasks_mail_at_most_once_an_hour(store_url, smtp):
    s, m, tasks = running_array(store_url, smtp, "requeue")
    s.mark_finished(tasks[1].id, now=5, exit_code=1, node_lost=True, reason="node n0 lost")    # requeued
    s.mark_finished(tasks[2].id, now=6, exit_code=1, node_lost=True, reason="node n0 lost")
    assert m.round(now=20) == 1                                         # one for the array, not two
    assert smtp.subjects() == [f"[ComputeHub] job array grid {tasks[0].id} task 1 is back in line"]
    said = " ".join(smtp.mails[0].get_content().split())
    assert f"task 1 ({tasks[1].id}) is back in line since 1970-01-01 00:00:05 UTC: node n0 lost." in said, said
    s.cycle(now=30)
    s.mark_running(tasks[1].id, now=31)
    s.mark_finished(tasks[1].id, now=40, exit_code=1, node_lost=True, reason="node n0 lost again")
    assert m.round(now=60) == 0                                         # within the hour of the last
    s.cycle(now=3700)
    s.mark_running(tasks[1].id, now=3701)
    s.mark_finished(tasks[1].id, now=3710, exit_code=1, node_lost=True, reason="node n0 lost once more")
    assert m.round(now=3720) == 1                                       # an hour on: mailed again
    assert smtp.subjects()[1] == f"[ComputeHub] job array grid {tasks[0].id} task 1 is back in line"
    again = Mailer(s, smtp.controller.port)                             # a restart remembers the hour
    s.cycle(now=3800)
    s.mark_running(tasks[1].id, now=3801)
    s.mark_finished(tasks[1].id, now=3810, exit_code=1, node_lost=True, reason="and again")
    assert again.round(now=3830) == 0 and len(smtp.mails) == 2


def test_a_mail_server_that_is_down_gets_the_mail_later_and_a_restart_repeats_nothing(store_url, smtp, caplog):
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port, mail_interval=7)
    a = job(s, queue="a", name="a", now=1, mail="end")
    b = job(s, queue="a", name="b", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(a.id, now=3)
    port = smtp.controller.port
    smtp.controller.stop()
    with caplog.at_level(logging.WARNING, "test-mail"):
        assert m.round(now=20) == 0
    assert "mail waits: the SMTP server 127.0.0.1" in caplog.text and "trying again in 7 s" in caplog.text
    assert (m.mail_sent, m.mail_waiting_since) == (0, 3)          # a's end waits: the metrics' backlog
    smtp.controller = Controller(smtp, hostname="127.0.0.1", port=port)   # the server is back
    smtp.controller.start()
    s.mark_finished(b.id, now=21)
    again = Mailer(Scheduler(store=SqlStore(store_url)), port)          # a restart in between
    assert again.round(now=30) == 2 and (again.mail_sent, again.mail_waiting_since) == (2, None)   # caught up
    assert smtp.subjects() == [f"[ComputeHub] a ({a.id}) finished", f"[ComputeHub] b ({b.id}) finished"]
    assert Mailer(Scheduler(store=SqlStore(store_url)), port).round(now=40) == 0


def test_an_address_the_server_refuses_is_passed_over_and_the_others_go(store_url, smtp, caplog):
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port)
    smtp.refuse.add("bob@example.org")
    b = job(s, queue="a", user="bob", name="b", now=1, mail="end")
    a = job(s, queue="a", name="a", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(b.id, now=3)
    s.mark_finished(a.id, now=4)
    with caplog.at_level(logging.WARNING, "test-mail"):
        assert m.round(now=20) == 2
    assert smtp.subjects() == [f"[ComputeHub] a ({a.id}) finished"] and (m.mail_sent, m.mail_refused) == (1, 1)
    assert "no mail to 'bob@example.org': the SMTP server refused it" in caplog.text


def test_work_from_before_mail_was_switched_on_is_not_mailed(tmp_path, smtp):
    s = sched_on(f"sqlite:///{tmp_path / 'db.sqlite'}")
    w = job(s, queue="a", name="old", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(w.id, now=3)
    assert Mailer(s, smtp.controller.port).round(now=20) == 0


def test_mail_types_are_checked_at_submission():
    s = cluster(nodes=1, gpus=8)
    with pytest.raises(ValidationError, match="unknown mail type 'finish'; one of begin"):
        job(s, queue="a", mail="finish")
    with pytest.raises(ValidationError, match="mail must be a list of mail types"):
        job(s, queue="a", mail=3)
    with pytest.raises(ValidationError, match="'mail' are set by ComputeHub"):
        job(s, queue="a", metadata={"mail": ["end"]})
    assert job(s, queue="a", mail=["End", "all"]).metadata["mail"] == ["begin", "end", "fail", "requeue"]
    assert "mail" not in job(s, queue="a").metadata


def test_an_address_template_without_user_is_refused():
    with pytest.raises(Exception, match=r"mail_address must contain \{user\}"):
        Mail(mail_address="team@example.org")
    svc = Mail()
    with pytest.raises(ValidationError, match="this ComputeHub sends no mail"):
        svc.check_mail_wanted({"mail": ["end"], "user": "alice"})
    for none in ([], "none", ["none"]):                                 # taking mail back is always fine
        svc.check_mail_wanted({"mail": none, "user": "alice"})


def test_particular_users_addresses_come_first_and_a_user_with_none_is_told(store_url, smtp):
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port, mail_addresses={"gh-octocat": "octo@lab.example.org"})
    m.mail_address = ""
    assert m.mails and m.address_of("gh-octocat") == "octo@lab.example.org" and m.address_of("ada") == ""
    with pytest.raises(ValidationError, match="ComputeHub knows no mail address for ada .* mail_addresses"):
        m.check_mail_wanted({"mail": ["end"], "user": "ada"})
    m.check_mail_wanted({"mail": ["end"], "user": "gh-octocat"})
    w = job(s, queue="a", user="gh-octocat", name="o", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(w.id, now=3)
    assert m.round(now=20) == 1 and smtp.mails[0]["To"] == "octo@lab.example.org"


@pytest.mark.parametrize("to", ["a@example.org\r\nBcc: eve@example.org", "a,eve@example.org", "a b@example.org"])
def test_an_address_is_one_plain_address_or_no_mail_at_all(to):
    from hub_ext.mail_compose import message
    with pytest.raises(ValueError):
        message("ComputeHub <c@example.org>", to, "s", "b")


def test_mail_can_be_asked_for_after_submission_and_for_a_whole_array(store_url, smtp):
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port)
    w = job(s, queue="a", name="long", now=1)
    tasks = job(s, queue="a", name="grid", now=1, array="0-1", mail="begin")
    s.cycle(now=2)
    s.mark_running(w.id, now=3)
    changed = s.set_mail(w.id, "end", now=4, actor="ada")           # going home: tell me how it ends
    assert [t.id for t in changed] == [w.id] and s.get(w.id).metadata["mail"] == ["end"]
    assert [t.id for t in s.set_mail(tasks[1].id, ["end"], now=4)] == [t.id for t in tasks]
    assert Scheduler(store=SqlStore(store_url)).get(tasks[0].id).metadata["mail"] == ["end"]    # durable
    (e,) = s.events(kinds=("mail_updated",), workload_id=w.id)
    assert (e.reason, e.data["actor"]) == ("end", "ada")
    for t in tasks:
        s.mark_running(t.id, now=5)
    for t in (w, *tasks):
        s.mark_finished(t.id, now=6)
    assert m.round(now=20) == 2
    assert smtp.subjects() == [f"[ComputeHub] long ({w.id}) finished",
                               f"[ComputeHub] job array grid {tasks[0].id} ended (2 finished)"]
    with pytest.raises(Exception, match="is finished: there is nothing left to mail about"):
        s.set_mail(w.id, "end", now=30)


def test_a_maildir_instead_of_a_mail_server(tmp_path):
    import mailbox
    s = sched_on(f"sqlite:///{tmp_path / 'db.sqlite'}")
    m = Mailer(s, 1, mail_maildir=str(tmp_path / "mail"))
    m.smtp_host = ""                                                    # no mail server at all
    assert m.mails
    w = job(s, queue="a", name="boxed", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(w.id, now=3)
    assert m.round(now=20) == 1
    (got,) = list(mailbox.Maildir(str(tmp_path / "mail"), create=False))
    assert got["Subject"] == f"[ComputeHub] boxed ({w.id}) finished" and got["To"] == "ada@example.org"


def test_a_burst_is_read_a_batch_at_a_time_and_says_when_more_waits(tmp_path, smtp, monkeypatch):
    import hub_ext.mail as mail
    monkeypatch.setattr(mail, "BATCH", 4)
    s = sched_on(f"sqlite:///{tmp_path / 'db.sqlite'}")
    m = Mailer(s, smtp.controller.port)
    jobs = [job(s, queue="a", name=f"j{i}", now=1, mail="end") for i in range(3)]
    s.cycle(now=2)
    for w in jobs:
        s.mark_finished(w.id, now=3)
    rounds = []
    while True:
        rounds.append(m.round(now=20))
        if not m.mail_more:
            break
    assert sum(rounds) == 3 and len(rounds) >= 3            # 3 submitted + 3 admitted + 3 ended events
    assert smtp.subjects() == [f"[ComputeHub] j{i} ({w.id}) finished" for i, w in enumerate(jobs)]
    before = s.store.get_meta("mail_state")
    assert m.round(now=30) == 0 and not m.mail_more and s.store.get_meta("mail_state") == before


def test_one_user_gets_at_most_so_many_mails_an_hour(tmp_path, smtp, caplog):
    s = sched_on(f"sqlite:///{tmp_path / 'db.sqlite'}")
    m = Mailer(s, smtp.controller.port, mail_per_user_hour=2)
    first = [job(s, queue="a", name=f"j{i}", now=1, mail="end") for i in range(4)]
    other = job(s, queue="a", user="bob", name="b", now=1, mail="end")          # another user: own limit
    s.cycle(now=2)
    for w in (*first, other):
        s.mark_finished(w.id, now=3)
    with caplog.at_level(logging.WARNING, "test-mail"):
        assert m.round(now=20) == 3
    assert smtp.subjects() == [f"[ComputeHub] j0 ({first[0].id}) finished",
                               f"[ComputeHub] j1 ({first[1].id}) finished", f"[ComputeHub] b ({other.id}) finished"]
    assert (m.mail_sent, m.mail_over_limit) == (3, 2)
    assert caplog.text.count("no more mail to 'ada@example.org' for up to an hour") == 1
    again = Mailer(s, smtp.controller.port, mail_per_user_hour=2)               # a restart: the hour goes on
    soon = job(s, queue="a", name="soon", now=100, mail="end")
    s.cycle(now=101)
    s.mark_finished(soon.id, now=102)
    assert again.round(now=120) == 0 and again.mail_over_limit == 1
    late = job(s, queue="a", name="late", now=3700, mail="end")                  # an hour later: mail again
    s.cycle(now=3701)
    s.mark_finished(late.id, now=3702)
    assert again.round(now=3720) == 1 and smtp.subjects()[-1] == f"[ComputeHub] late ({late.id}) finished"


def test_a_mail_the_server_did_not_take_does_not_count_against_the_limit(tmp_path, smtp):
    s = sched_on(f"sqlite:///{tmp_path / 'db.sqlite'}")
    port = smtp.controller.port
    m = Mailer(s, port, mail_per_user_hour=1)
    w = job(s, queue="a", name="once", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(w.id, now=3)
    smtp.controller.stop()
    assert m.round(now=20) == 0 and m.round(now=30) == 0                # the server is down, twice
    smtp.controller = Controller(smtp, hostname="127.0.0.1", port=port)
    smtp.controller.start()
    assert m.round(now=40) == 1 and m.mail_over_limit == 0
    assert smtp.subjects() == [f"[ComputeHub] once ({w.id}) finished"]
