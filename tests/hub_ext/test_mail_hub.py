"""Mail through the real hub, proxy and service (its mail loop) with the installed CLI, to a real
SMTP server (aiosmtpd on 127.0.0.1): ``submit --mail``, the mails a job's start and end send,
and the refusals. The launcher's reports are this test's (as in test_flow.py)."""

from __future__ import annotations

import re
import time

import requests

from test_cli_client import cli, ok, one_line_error, submitted  # noqa: F401
from test_dependencies_hub import until
from test_mail import Inbox, free_port, mail_config

from aiosmtpd.controller import Controller
from realhub import RealHub

SMALL = ("--kind", "batch", "--gpus", "0", "--cpu", "100m")


def test_a_hub_that_sends_no_mail_refuses_a_job_asking_for_it(hub):
    line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--mail", "end"))
    assert "this ComputeHub sends no mail (its admin sets ComputeHubService.smtp_host and mail_address)" in line
    said = ok(cli(hub, "alice", "mail-address")).strip()
    assert said == "no mail address: this ComputeHub mails you nowhere (its admin sets where mail goes)", said
    line = one_line_error(cli(hub, "alice", "mail-address", "alice@example.org"))
    assert "this ComputeHub sends no mail (its admin sets ComputeHubService.smtp_host)" in line, line


def test_my_job_mails_me_when_it_starts_and_ends(tmp_path):
    inbox = Inbox()
    port = free_port()
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    config = mail_config(port, mail_from='"ComputeHub <computehub@example.org>"',
                         mail_user_domains='["lab.example.org"]')
    try:
        with RealHub(tmp_path, extra_service_config=config) as hub:
            line = one_line_error(cli(hub, "alice", "submit", *SMALL, "--mail", "end,finish"))
            assert "unknown mail type 'finish'; one of begin (it started), end (it ended, however)" in line, line

            out = ok(cli(hub, "alice", "submit", *SMALL, "--name", "nightly", "--mail", "begin,end"))
            wid = out.split()[0]
            w = hub.call("GET", f"/workloads/{wid}", hub.tokens["alice"]).json()
            assert w["metadata"]["mail"] == ["begin", "end"], w
            until(hub, "alice", wid, ("admitted",))
            r = hub.call("POST", f"/workloads/{wid}/status", hub.launcher_token, json={"state": "running"})
            assert r.status_code == 200, r.text
            r = hub.call("POST", f"/workloads/{wid}/status", hub.launcher_token,
                         json={"state": "failed", "exit_code": 2, "reason": "exit code 2: no data"})
            assert r.status_code == 200, r.text
            until_true(lambda: len(inbox.mails) >= 2)
            assert inbox.subjects() == [f"[ComputeHub] nightly ({wid}) started",
                                        f"[ComputeHub] nightly ({wid}) failed (exit code 2)"]
            assert {m["To"] for m in inbox.mails} == {"alice@example.org"}
            assert inbox.mails[0]["From"] == "ComputeHub <computehub@example.org>"
            assert "why:        exit code 2: no data" in inbox.mails[1].get_content()
            time.sleep(1.5)                                             # three more rounds: nothing again
            assert len(inbox.mails) == 2

            # Asked for after submission (going home), then taken back on another job.
            later = ok(cli(hub, "alice", "submit", *SMALL, "--name", "later")).split()[0]
            quiet = ok(cli(hub, "alice", "submit", *SMALL, "--name", "quiet", "--mail", "end")).split()[0]
            until(hub, "alice", later, ("admitted",))
            assert ok(cli(hub, "alice", "mail", later, "end,fail")).strip() == f"{later}  admitted  mail: end, fail"
            assert ok(cli(hub, "alice", "mail", quiet, "none")).strip().endswith("mail: none")
            line = one_line_error(cli(hub, "bob", "mail", later, "none"))
            assert f"no workload '{later}'" in line, line                   # not his to see
            line = one_line_error(cli(hub, "alice", "mail", later, "sometimes"))
            assert "unknown mail type 'sometimes'" in line, line
            for wid in (later, quiet):
                until(hub, "alice", wid, ("admitted",))
                r = hub.call("POST", f"/workloads/{wid}/status", hub.launcher_token, json={"state": "finished"})
                assert r.status_code == 200, r.text
            until_true(lambda: len(inbox.mails) >= 3)
            time.sleep(1.5)
            assert inbox.subjects()[2:] == [f"[ComputeHub] later ({later}) finished"]
            line = one_line_error(cli(hub, "alice", "mail", later, "end"))
            assert f"workload {later} is finished: there is nothing left to mail about" in line, line
            # What Prometheus reads: three mails sent, none refused, nothing waiting.
            text = metrics(hub)
            assert 'computehub_mails_total{result="sent"} 3.0' in text and \
                'computehub_mails_total{result="refused"} 0.0' in text and \
                'computehub_mails_total{result="over_limit"} 0.0' in text and \
                "computehub_mail_backlog_seconds 0.0" in text

            # Her own address, in a domain the admin allows (Slurm's --mail-user), then the admin's again.
            said = ok(cli(hub, "alice", "mail-address")).strip()
            assert said == "mail goes to alice@example.org (the admin's; you may give another in lab.example.org)"
            # It takes the code mailed there: until then her mail goes where it went.
            said = ok(cli(hub, "alice", "mail-address", "Alice.W@Lab.Example.org")).strip()
            assert said == ("mail goes to alice@example.org (the admin's; you may give another in lab.example.org)\n"
                            "a code went to Alice.W@lab.example.org: mail goes there once you give it back, within "
                            "a day (computehub mail-address --confirm CODE)"), said
            assert len(inbox.mails) == 4 and inbox.mails[3]["To"] == "Alice.W@lab.example.org"
            assert inbox.subjects()[3] == "[ComputeHub] confirm your mail address"
            code = re.search(r"computehub mail-address --confirm (\d{8})", inbox.mails[3].get_content()).group(1)
            line = one_line_error(cli(hub, "alice", "mail-address", "Alice.W@Lab.Example.org"))
            assert "a code went out" in line and "before asking for another" in line, line      # 429: no flood
            line = one_line_error(cli(hub, "alice", "mail-address", "--confirm", f"{(int(code) + 1) % 10**8:08d}"))
            assert "that is not the code mailed to Alice.W@lab.example.org: 4 tries left" in line, line
            line = one_line_error(cli(hub, "bob", "mail-address", "--confirm", code))        # hers, not his
            assert "no address of yours waits for a code" in line, line
            said = ok(cli(hub, "alice", "mail-address", "--confirm", code)).strip()
            assert said == "mail goes to Alice.W@lab.example.org (yours; you may give another in lab.example.org)"
            for bad, says in (("eve@elsewhere.org", "ComputeHub mails addresses in lab.example.org only, not in "
                                                    "elsewhere.org"),
                              ("alice@lab.example.org\nBcc: eve@elsewhere.org", "is not a mail address")):
                line = one_line_error(cli(hub, "alice", "mail-address", bad))
                assert says in line, line
            r = hub.call("PUT", "/me/mail-address", hub.tokens["alice"], json={"address": "a@lab.example.org", "cc": 1})
            assert r.status_code == 400 and 'send {"address": ' in r.json()["message"], r.text
            r = hub.call("PUT", "/me/mail-address", hub.launcher_token, json={"address": "l@lab.example.org"})
            assert r.status_code == 403 and "not a service" in r.json()["message"], r.text
            me = hub.call("GET", "/me", hub.tokens["bob"]).json()          # hers alone
            assert (me["mail_address"], me["mail_address_own"]) == ("bob@example.org", False), me
            own = ok(cli(hub, "alice", "submit", *SMALL, "--name", "own", "--mail", "end")).split()[0]
            until(hub, "alice", own, ("admitted",))
            r = hub.call("POST", f"/workloads/{own}/status", hub.launcher_token, json={"state": "finished"})
            assert r.status_code == 200, r.text
            until_true(lambda: len(inbox.mails) >= 5)
            assert inbox.subjects()[4:] == [f"[ComputeHub] own ({own}) finished"]
            assert inbox.mails[4]["To"] == "Alice.W@lab.example.org"
            said = ok(cli(hub, "alice", "mail-address", "none")).strip()
            assert said.startswith("mail goes to alice@example.org (the admin's"), said
            audit = hub.call("GET", "/audit?kind=mail_address_set", hub.tokens["ada"]).json()
            assert [(e["data"]["user"], e["data"]["after"]) for e in audit["events"]] == [
                ("alice", "Alice.W@lab.example.org"), ("alice", "")], audit
            asked = hub.call("GET", "/audit?kind=mail_address_requested", hub.tokens["ada"]).json()["events"]
            assert [(e["data"]["user"], e["data"]["address"]) for e in asked] == [("alice", "Alice.W@lab.example.org")]
            assert code not in str(asked)                                   # the code is never in the log
    finally:
        smtp.stop()


def metrics(hub) -> str:
    r = requests.get(hub.service_url + "/metrics", headers={"Authorization": f"token {hub.tokens['ada']}"},
                     timeout=10)
    assert r.status_code == 200, r.text
    return r.text


def test_mail_that_cannot_go_out_shows_in_the_metrics_and_goes_once_the_server_is_back(tmp_path):
    inbox = Inbox()
    port = free_port()                   # nothing listens here yet: the server is down
    config = mail_config(port)
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    try:
        with RealHub(tmp_path, extra_service_config=config) as hub:
            assert "computehub_mail_backlog_seconds 0.0" in metrics(hub)
            wid = ok(cli(hub, "alice", "submit", *SMALL, "--name", "waits", "--mail", "end")).split()[0]
            assert hub.call("DELETE", f"/workloads/{wid}", hub.tokens["alice"]).status_code == 200
            backlog = until_true(lambda: float(re.search(r"^computehub_mail_backlog_seconds (\S+)$",
                                                         metrics(hub), re.M).group(1)) > 0)
            assert backlog
            smtp.start()                                                # the server is back
            until_true(lambda: inbox.mails)
            assert inbox.subjects() == [f"[ComputeHub] waits ({wid}) was cancelled"]
            until_true(lambda: "computehub_mail_backlog_seconds 0.0" in metrics(hub))
    finally:
        if smtp.loop.is_running():
            smtp.stop()


def until_true(fn, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout} s")
