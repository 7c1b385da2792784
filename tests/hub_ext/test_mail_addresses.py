"""Users' own mail addresses (hub_ext/mail_addresses.py) in the domains the admin allows: checked,
kept in a real database (SQLite, PostgreSQL) across a restart, audited, and used for the user's
mail, sent to a real SMTP server (aiosmtpd on 127.0.0.1). Through the hub, proxy and CLI:
test_mail_hub.py."""

from __future__ import annotations

import pytest
from test_mail import Mailer, sched_on, smtp  # noqa: F401

from hub_ext.mail import Mail
from scheduler.config_checks import ConfigError
from scheduler.errors import ValidationError

from sched_helpers import job


def test_a_users_own_address_is_where_their_mail_goes_and_is_kept_across_a_restart(store_url, smtp):  # noqa: F811
    s = sched_on(store_url)
    m = Mailer(s, smtp.controller.port, mail_user_domains=["Example.org"])
    assert m.mail_user_domains == ["example.org"] and m.address_of("ada") == "ada@example.org"   # the admin's
    assert m.set_own_address("ada", " Ada.L@Lab.Example.ORG ", actor="ada") == "Ada.L@lab.example.org"
    assert m.address_of("ada") == "Ada.L@lab.example.org" and m.address_of("bob") == "bob@example.org"
    w = job(s, queue="a", user="ada", name="nightly", now=1, mail="end")
    s.cycle(now=2)
    s.mark_finished(w.id, now=3)
    # (The address's audit event is at the scheduler's clock, now: the round is later than both.)
    assert m.round(now=s.clock() + 60) == 1 and smtp.mails[0]["To"] == "Ada.L@lab.example.org"

    again = Mailer(sched_on(store_url), smtp.controller.port, mail_user_domains=["example.org"])    # a restart
    assert again.address_of("ada") == "Ada.L@lab.example.org"
    again.set_own_address("ada", "", actor="ada")                   # back to the admin's
    assert again.address_of("ada") == "ada@example.org"
    events = [e for e in again.sched.store.get_events(kinds=("mail_address_set",))]
    assert [(e.data["actor"], e.data["before"], e.data["after"]) for e in events] == [
        ("ada", "", "Ada.L@lab.example.org"), ("ada", "Ada.L@lab.example.org", "")]


@pytest.mark.parametrize("address, says", [
    ("eve@elsewhere.org", "ComputeHub mails addresses in example.org only, not in elsewhere.org"),
    ("eve@notexample.org", "not in notexample.org"),
    ("eve@example.org.elsewhere.org", "not in example.org.elsewhere.org"),
    ("ada@example.org\r\nBcc: eve@elsewhere.org", "is not a mail address"),
    ("ada,eve@example.org", "is not a mail address"),
    ("ada lovelace@example.org", "is not a mail address"),
    ("ada", "is not a mail address"),
    ("@example.org", "is not a mail address"),
    ("ada@", "is not a mail address"),
    ("ada@-example.org", "is not a mail address"),
    ("a" * 65 + "@example.org", "is not a mail address"),
    ("ada@" + "a" * 250 + ".example.org", "is not a mail address"),
    (3, 'send {"address": "ada@lab.example.org"}'),
])
def test_an_address_outside_the_domains_or_not_an_address_is_refused_and_nothing_changes(tmp_path, smtp,  # noqa: F811
                                                                                         address, says):
    m = Mailer(sched_on(f"sqlite:///{tmp_path / 'store.sqlite'}"), smtp.controller.port,
               mail_user_domains=["example.org"])
    m.set_own_address("ada", "ada@lab.example.org", actor="ada")
    with pytest.raises(ValidationError, match=says.replace("(", r"\(").replace("{", r"\{")):
        m.set_own_address("ada", address, actor="ada")
    assert m.address_of("ada") == "ada@lab.example.org"
    assert len(m.sched.store.get_events(kinds=("mail_address_set",))) == 1


def test_where_the_admin_names_no_domains_users_cannot_choose(tmp_path, smtp):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    m = Mailer(sched_on(url), smtp.controller.port, mail_user_domains=["*"])
    assert m.set_own_address("ada", "ada@anywhere.example", actor="ada") == "ada@anywhere.example"    # '*': any
    closed = Mailer(sched_on(url), smtp.controller.port)             # the admin took the domains away
    assert closed.address_of("ada") == "ada@example.org"             # what she gave is no longer used
    with pytest.raises(ValidationError, match="does not let users choose where their mail goes"):
        closed.set_own_address("ada", "ada@example.org", actor="ada")


def test_mail_user_domains_are_checked_and_alone_make_mail_possible():
    with pytest.raises(ConfigError, match="mail_user_domains: 'not a domain' is not a domain name"):
        Mail(mail_user_domains=["not a domain"])
    with pytest.raises(ConfigError, match="'example' is not a domain name"):
        Mail(mail_user_domains=["example"])
    assert Mail(mail_user_domains=["@Lab.Example.org"]).mail_user_domains == ["lab.example.org"]
    m = Mail(smtp_host="127.0.0.1", mail_user_domains=["example.org"])       # no address of the admin's
    assert m.mails and m.address_of("ada") == ""
    with pytest.raises(ValidationError, match="give yours with computehub mail-address ADDRESS, in example.org; or "
                                              "leave out mail"):
        m.check_mail_wanted({"mail": ["end"], "user": "ada"})
