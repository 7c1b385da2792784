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


def _code_in(mail) -> str:
    import re
    return re.search(r"computehub mail-address --confirm (\d{8})", mail.get_content()).group(1)


def _ask(m, user, address) -> str:
    """What ``PUT me/mail-address`` does: the address checked, a code mailed to it, kept waiting."""
    address = m.start_confirmation(user, address)
    code = m.new_code()
    assert m.mail_code(user, address, code) == "sent"
    m.keep_pending(user, address, code, actor=user)
    return address


def test_an_address_is_used_only_once_the_code_mailed_to_it_comes_back(tmp_path, smtp):  # noqa: F811
    from hub_ext.mail_addresses import TooSoon
    m = Mailer(sched_on(f"sqlite:///{tmp_path / 'store.sqlite'}"), smtp.controller.port,
               mail_user_domains=["example.org"])
    assert m.mail_address_confirmation
    assert _ask(m, "ada", "Ada@Lab.Example.org") == "Ada@lab.example.org"
    sent = smtp.mails[-1]
    assert sent["To"] == "Ada@lab.example.org" and sent["Subject"] == "[ComputeHub] confirm your mail address"
    assert "the ComputeHub user ada asked" in sent.get_content() and "good for 24 hours" in sent.get_content()
    assert m.address_of("ada") == "ada@example.org" and m.pending_address("ada") == "Ada@lab.example.org"
    code = _code_in(sent)
    with pytest.raises(ValidationError, match="not the code mailed to Ada@lab.example.org: 4 tries left"):
        m.confirm_own_address("ada", f"{(int(code) + 1) % 10**8:08d}", actor="ada")
    with pytest.raises(ValidationError, match="no address of yours waits for a code"):
        m.confirm_own_address("bob", code, actor="bob")
    assert m.confirm_own_address("ada", f" {code} ", actor="ada") == "Ada@lab.example.org"
    assert m.address_of("ada") == "Ada@lab.example.org" and m.pending_address("ada") == ""
    with pytest.raises(ValidationError, match="no address of yours waits for a code"):
        m.confirm_own_address("ada", code, actor="ada")                    # used up
    with pytest.raises(TooSoon):            # the day's sends stay counted after a confirmation
        m.start_confirmation("ada", "ada.other@example.org")
    assert m.start_confirmation("ada", "Ada@LAB.example.org") == ""      # the one in use: nothing to confirm
    # Kept in the database: a restart knows what waits (and only the code's hash is there).
    _ask(Mailer(m.sched, smtp.controller.port, mail_user_domains=["example.org"]), "cy", "cy@example.org")
    again = Mailer(sched_on(f"sqlite:///{tmp_path / 'store.sqlite'}"), smtp.controller.port,
                   mail_user_domains=["example.org"])
    assert again.pending_address("cy") == "cy@example.org"
    assert _code_in(smtp.mails[-1]) not in (again.sched.store.get_meta("mail_user_pending") or "")
    asked = again.sched.store.get_events(kinds=("mail_address_requested",))
    assert [(e.data["user"], e.data["address"]) for e in asked] == [("ada", "Ada@lab.example.org"),
                                                                    ("cy", "cy@example.org")]


def test_codes_expire_and_run_out_of_tries_and_nobody_can_flood_an_address(tmp_path, smtp):  # noqa: F811
    from hub_ext.mail_addresses import CODES_PER_DAY, CONFIRM_S, CONFIRM_TRIES, RESEND_S, TooSoon
    m = Mailer(sched_on(f"sqlite:///{tmp_path / 'store.sqlite'}"), smtp.controller.port,
               mail_user_domains=["example.org"])
    t = [1000.0]
    m.sched.clock = lambda: t[0]
    _ask(m, "eve", "ada@example.org")
    with pytest.raises(TooSoon, match="wait 60 s before asking for another"):
        m.start_confirmation("eve", "bob@example.org")
    # Two requests at once: the first counts before its mail goes, so the second is refused.
    assert m.start_confirmation("zed", "zed.x@example.org") == "zed.x@example.org"
    with pytest.raises(TooSoon, match="wait 60 s"):
        m.start_confirmation("zed", "zed.y@example.org")
    for _ in range(CODES_PER_DAY - 1):
        t[0] += RESEND_S
        _ask(m, "eve", "ada@example.org")
    t[0] += RESEND_S
    with pytest.raises(TooSoon, match=f"{CODES_PER_DAY} codes went out in the last day"):
        m.start_confirmation("eve", "bob@example.org")
    assert len(smtp.mails) == CODES_PER_DAY
    for _ in range(CONFIRM_TRIES - 1):
        with pytest.raises(ValidationError, match="tries left"):
            m.confirm_own_address("eve", "00000000" if _code_in(smtp.mails[-1]) != "00000000" else "1", actor="eve")
    with pytest.raises(ValidationError, match="no tries left; give the address again"):
        m.confirm_own_address("eve", "00000000" if _code_in(smtp.mails[-1]) != "00000000" else "1", actor="eve")
    with pytest.raises(ValidationError, match="no address of yours waits for a code"):
        m.confirm_own_address("eve", _code_in(smtp.mails[-1]), actor="eve")    # void now, right or not
    assert m.address_of("eve") == "eve@example.org"
    t[0] += 86400                                                       # a day later: codes again
    _ask(m, "eve", "eve.x@example.org")
    t[0] += CONFIRM_S + 1
    with pytest.raises(ValidationError, match="its code has expired: give the address again"):
        m.confirm_own_address("eve", _code_in(smtp.mails[-1]), actor="eve")
    assert m.address_of("eve") == "eve@example.org"


def test_with_confirmation_off_an_address_is_used_at_once(tmp_path, smtp):  # noqa: F811
    m = Mailer(sched_on(f"sqlite:///{tmp_path / 'store.sqlite'}"), smtp.controller.port,
               mail_user_domains=["example.org"], mail_address_confirmation=False)
    assert m.start_confirmation("ada", "ada@lab.example.org") == ""       # the handler sets it at once
    with pytest.raises(ValidationError, match="not in elsewhere.org"):
        m.start_confirmation("ada", "ada@elsewhere.org")
    assert not smtp.mails
