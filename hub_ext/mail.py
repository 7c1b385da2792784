"""Mail to a job's owner when it starts, ends, fails or is requeued, as the submission asked
(``mail``: Slurm's ``--mail-type``). Mixed into ``ComputeHubService``.

The mailer follows the audit log (the events table), every ``mail_interval`` seconds, on a
worker thread: the scheduler's decisions never wait for a mail server. Where it stands (the
last event it has dealt with) is kept in the database, so a restart neither loses nor repeats
what was sent before; a mail server that is down is tried again at the next round, from the
first mail not sent (each mail goes at least once). Events younger than ``SETTLE_S`` wait for
the next round: another transaction may still commit an earlier one. A job array gets one
mail when its first task starts and one when none of its tasks is live any more, not one
per task, and at most one an hour when its tasks are requeued.
"""

from __future__ import annotations

import asyncio
import json
import mailbox
import os
import smtplib
import time

from traitlets import Dict, Enum, Float, HasTraits, Integer, Unicode, default, validate

from scheduler.config_checks import ConfigError, check_number
from scheduler.errors import StoreUnavailable, ValidationError
from scheduler.mail_types import BEGIN, END, FAIL, MAIL, REQUEUE
from scheduler.model import LIVE, TERMINAL

from .mail_addresses import CONFIRM_S, OwnMailAddresses
from .mail_compose import array_mail, confirm_mail, message, workload_mail

STATE_KEY = "mail_state"    # meta: {"after": event id, "begun": [array ids], "ended": [array ids],
#                                    "requeued": {array id: when its last requeue mail's event was},
#                                    "recent": {address: [when each mail of the last hour went]}}
SETTLE_S = 5.0              # events younger than this wait a round (an earlier one may still commit)
BATCH = 1000                # events read per round at most
KEEP_ARRAYS = 1000          # array ids remembered in each of begun / ended


class Mail(OwnMailAddresses, HasTraits):
    """Needs ``sched`` (its store) and ``log``; ``mail_loop`` runs beside the service."""

    # For the metrics (metrics_health.py): mails the server took, and refused, since the start;
    # when the oldest change whose mail waits for a failing server happened (None: caught up).
    mail_sent = 0
    mail_refused = 0
    mail_over_limit = 0
    mail_waiting_since: float | None = None
    mail_more = False       # the last round read a whole batch: the next comes at once

    @property
    def _mail_recent(self) -> dict[str, list[float]]:
        """Per address, when each mail of the last hour went (for ``mail_per_user_hour``)."""
        return self.__dict__.setdefault("_mail_recent_d", {})

    @property
    def _mail_warned(self) -> dict[str, float]:
        """Per address, when the log last said it is over its limit."""
        return self.__dict__.setdefault("_mail_warned_d", {})

    smtp_host = Unicode(
        "", config=True,
        help="""Host name of the SMTP server ComputeHub sends its mails through (a job's owner asks for
        them with `mail` at submission: computehub run --mail end,fail). Empty: no mail, and a
        submission asking for mail is refused (400) saying so. Needs `mail_address` or
        `mail_addresses` too.""")
    smtp_port = Integer(0, config=True, help="Port of the SMTP server (default: 465 with `tls`, else 25).")
    smtp_security = Enum(
        ["none", "starttls", "tls"], "none", config=True,
        help="How the connection to the SMTP server is secured: 'none' (plain, a relay on the same "
             "host or network), 'starttls' (upgraded after connecting, usually port 587) or 'tls' "
             "(TLS from the start, usually port 465).")
    smtp_username = Unicode("", config=True, help="User name to log in to the SMTP server with (empty: no login).")
    smtp_password = Unicode(
        config=True, help="Password for `smtp_username` (default: $COMPUTEHUB_SMTP_PASSWORD).")
    mail_from = Unicode(
        "ComputeHub <computehub@localhost>", config=True,
        help="The From: of ComputeHub's mails, e.g. 'ComputeHub <computehub@example.org>'.")
    mail_address = Unicode(
        "", config=True,
        help="""A user's mail address, with {user} for the JupyterHub user name: '{user}@example.org'.
        Empty: only the users in `mail_addresses` get mail.""")
    mail_addresses = Dict(
        Unicode(), config=True,
        help="""Addresses of particular users, before `mail_address`: {"alice": "alice@lab.example.org"}
        (hub user names that make no address, such as GitHub logins).""")
    mail_link = Unicode(
        "", config=True,
        help="The public URL of ComputeHub's pages that each mail names, e.g. "
             "'https://hub.example.org/services/computehub/' (empty: none).")
    mail_maildir = Unicode(
        "", config=True,
        help="""Instead of an SMTP server, put each mail into this Maildir folder (a file in its new/ per
        mail): to try mail out, as `computehub demo` does, or for a local mail system to deliver.""")
    mail_per_user_hour = Integer(
        100, config=True,
        help="""Most mails one user gets in an hour (0: no limit). Beyond it that user's mails are not
        sent until the hour has passed (logged, and counted as over_limit in computehub_mails_total):
        a script submitting thousands of jobs with mail must not flood its owner or the mail server.
        A job array's mails count once.""")
    mail_interval = Float(
        10.0, config=True,
        help="Seconds between two rounds of mail: how late a mail may be, at most, plus the "
             f"{SETTLE_S:.0f} seconds each change waits for earlier ones.")

    @default("smtp_password")
    def _smtp_password(self):
        return os.environ.get("COMPUTEHUB_SMTP_PASSWORD", "")

    @validate("mail_interval")
    def _mail_interval(self, proposal):
        return check_number("ComputeHubService.mail_interval", proposal.value, low=0, low_open=True,
                            unit="seconds")

    @validate("mail_address")
    def _mail_address(self, proposal):
        value = proposal.value
        if value and "{user}" not in value:
            raise ConfigError(f"ComputeHubService.mail_address must contain {{user}} (got {value!r}): "
                             "one address per user, e.g. '{user}@example.org'")
        return value

    @property
    def mails(self) -> bool:
        return bool((self.smtp_host or self.mail_maildir)
                    and (self.mail_address or self.mail_addresses or self.mail_user_domains))

    def admins_address(self, user: str) -> str:
        """The address the admin's settings make for ``user`` ("" for none)."""
        return self.mail_addresses.get(user) or (self.mail_address.format(user=user) if self.mail_address else "")

    def address_of(self, user: str) -> str:
        """Where ``user``'s mail goes: the address they gave (mail_addresses.py), else the admin's;
        "" for none."""
        return self.own_address(user) or self.admins_address(user)

    def check_mail_wanted(self, spec: dict) -> None:
        """A submission asking for mail that could not be sent is refused, not silently unmailed
        (asking for none is always fine)."""
        if not spec.get("mail") or spec["mail"] in ("none", ["none"]):
            return
        if not self.mails:
            raise ValidationError("this ComputeHub sends no mail (its admin sets ComputeHubService.smtp_host "
                                  "and mail_address); leave out mail")
        if not self.address_of(spec["user"]):
            yours = (": give yours with computehub mail-address ADDRESS, in "
                     f"{', '.join(self.mail_user_domains)}" if self.mail_user_domains else "")
            raise ValidationError(f"ComputeHub knows no mail address for {spec['user']} (its admin sets "
                                  f"ComputeHubService.mail_address or mail_addresses){yours}; "
                                  f"{'or ' if yours else ''}leave out mail")

    def smtp_connect(self) -> smtplib.SMTP:
        port = self.smtp_port or (465 if self.smtp_security == "tls" else 25)
        cls = smtplib.SMTP_SSL if self.smtp_security == "tls" else smtplib.SMTP
        smtp = cls(self.smtp_host, port, timeout=30)
        if self.smtp_security == "starttls":
            smtp.starttls()
        if self.smtp_username:
            smtp.login(self.smtp_username, self.smtp_password)
        return smtp

    # --- the rounds ----------------------------------------------------------------

    async def mail_loop(self) -> None:
        if not self.mails:
            return
        state = None
        while True:
            try:
                if state is None:
                    state = await asyncio.to_thread(self._mail_state)
                await asyncio.to_thread(self.mail_round, state)
                if self.mail_more:
                    continue            # a burst: the next batch at once
            except StoreUnavailable as e:
                self.log.warning("mail waits: the database is unavailable (%s)", e.detail)
            except Exception:       # noqa: BLE001 - a failed round must not stop the next one
                self.log.exception("a round of mail failed; trying again in %.0f s", self.mail_interval)
            await asyncio.sleep(self.mail_interval)

    def _mail_state(self) -> dict:
        raw = self.sched.store.get_meta(STATE_KEY)
        if raw:
            state = json.loads(raw)
            # Each user's mails of the last hour, as saved: a restart does not start the hour afresh.
            self.__dict__["_mail_recent_d"] = {to: list(ts) for to, ts in state.get("recent", {}).items()}
            return state
        # The first start with mail: from now on (what happened before was never promised a mail).
        return {"after": self.sched.store.last_event_id(), "begun": [], "ended": []}

    def mail_round(self, state: dict, now: float | None = None) -> int:
        """Mail what happened since ``state["after"]`` (updated, and saved); how many were sent.
        Event by event: one whose mail could not go stays for the next round, with all after it."""
        now = time.time() if now is None else now
        store = self.sched.store
        saved = json.dumps(state)
        sent, waiting_since = 0, None
        events = store.get_events(after_id=state["after"], limit=BATCH)
        with _Outbox(self) as outbox:
            for e in events:
                if e.time > now - SETTLE_S:
                    break
                mail, note = self._mail_for(e, state) if e.workload_id is not None else (None, None)
                if mail is not None and self._over_limit(mail[0], now):
                    mail = None
                if mail is not None:
                    if not outbox.send(*mail):
                        waiting_since = e.time
                        break
                    sent += 1
                    self._mail_recent.setdefault(mail[0], []).append(now)
                if note is not None and note[0] == "requeued":     # when the array's last such mail went
                    state["requeued"] = {a: t for a, t in state.get("requeued", {}).items() if t > e.time - 3600}
                    state["requeued"][note[1]] = e.time
                elif note is not None:          # ("begun" | "ended", array id)
                    state[note[0]] = [a for a in state[note[0]] if a != note[1]][-KEEP_ARRAYS + 1:] + [note[1]]
                    if note[0] == "ended":
                        state["begun"] = [a for a in state["begun"] if a != note[1]]
                state["after"] = e.id
        self.mail_sent += sent - outbox.refused
        self.mail_refused += outbox.refused
        self.mail_waiting_since = waiting_since     # the first unsent is the oldest: it goes first next time
        self.mail_more = len(events) == BATCH and bool(events) and state["after"] == events[-1].id
        if sent:                                    # for mail_per_user_hour across restarts
            state["recent"] = {to: ts for to, times in self._mail_recent.items()
                               if (ts := [t for t in times if t > now - 3600])}
        if json.dumps(state) != saved:              # a quiet round writes nothing
            with store.transaction():
                store.set_meta(STATE_KEY, json.dumps(state))
        return sent

    def mail_code(self, user: str, address: str, code: str) -> str:
        """Mail ``code`` to the ``address`` ``user`` gave (mail_addresses.py), at once, on the calling
        thread (it waits for the mail server): "sent", "refused" (the server refused the address) or
        "failed" (the server could not be reached, or failed)."""
        subject, body = confirm_mail(user, code, CONFIRM_S / 3600, self.mail_link)
        with _Outbox(self) as out:
            if not out.send(address, subject, body):
                return "failed"
            return "refused" if out.refused else "sent"

    def _over_limit(self, to: str, now: float) -> bool:
        """Whether ``to`` has had ``mail_per_user_hour`` mails in the last hour already (then this
        one is not sent: counted, and logged once an hour)."""
        times = self._mail_recent[to] = [t for t in self._mail_recent.get(to, ()) if t > now - 3600]
        if not self.mail_per_user_hour or len(times) < self.mail_per_user_hour:
            return False
        self.mail_over_limit += 1
        if self._mail_warned.get(to, float("-inf")) <= now - 3600:     # once an hour, not once a mail
            self._mail_warned[to] = now
            self.log.warning("no more mail to %r for up to an hour: %d sent in the last one, the most one "
                             "user gets (ComputeHubService.mail_per_user_hour)", to, len(times))
        return True

    def _mail_for(self, e, state: dict) -> tuple[tuple[str, str, str] | None, tuple[str, str] | None]:
        """The mail (to, subject, body) event ``e`` calls for, if any, and what to note of a job
        array once it went."""
        store = self.sched.store
        w = store.get_workload(e.workload_id)
        types = (w.metadata.get(MAIL) or []) if w is not None else []
        if not types:
            return None, None
        if e.kind == "started":
            kind = BEGIN
        elif e.kind == "requeued":
            kind = REQUEUE
        elif w.state in TERMINAL and w.ended_at is not None and abs(w.ended_at - e.time) < 1e-6:
            kind = END          # the event that ended it (its end time is this event's)
        else:
            return None, None
        to = self.address_of(w.user)
        if w.array is None:
            wanted = kind in types or (kind == END and FAIL in types and w.state == "failed")
            return ((to, *workload_mail(kind, w, e, self.mail_link)) if wanted else None), None
        aid = w.array["id"]
        if kind == REQUEUE:     # a task back in line: one mail an hour at most for the whole array
            last = state.get("requeued", {}).get(aid)
            if REQUEUE not in types or aid in state["ended"] or (last is not None and last > e.time - 3600):
                return None, None
            return (to, *array_mail(REQUEUE, w, {}, e.time, self.mail_link, e.reason)), ("requeued", aid)
        if kind == BEGIN:
            if aid in state["begun"] or aid in state["ended"] or BEGIN not in types:
                return None, None
            return (to, *array_mail(BEGIN, w, {}, e.time, self.mail_link)), ("begun", aid)
        if aid in state["ended"] or store.count_workloads(array=aid, states=LIVE):
            return None, None
        counts: dict[str, int] = {}
        last = e.time
        for t in store.get_workloads(array=aid):
            counts[t.state] = counts.get(t.state, 0) + 1
            last = max(last, t.ended_at or 0)
        wanted = END in types or (FAIL in types and counts.get("failed"))
        mail = array_mail(END, w, counts, last, self.mail_link)
        return ((to, *mail) if wanted else None), ("ended", aid)


class _Outbox:
    """One SMTP connection for a round, opened at its first mail. ``send`` is False when the
    server cannot be reached or fails: the round stops there. A recipient it refuses is logged
    and passed over (True): one bad address must not hold up everyone's mail."""

    def __init__(self, svc: Mail):
        self.svc = svc
        self.smtp = None
        self.refused = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.smtp is not None:
            try:
                self.smtp.quit()
            except (OSError, smtplib.SMTPException):
                pass

    def send(self, to: str, subject: str, body: str) -> bool:
        svc = self.svc
        try:
            m = message(svc.mail_from, to, subject, body)
        except ValueError as e:     # the template made no address of this user name
            svc.log.warning("no mail to %r: not an address (%s)", to, e)
            self.refused += 1
            return True
        try:
            if svc.mail_maildir:
                mailbox.Maildir(svc.mail_maildir, create=True).add(m)
                return True
            if self.smtp is None:
                self.smtp = svc.smtp_connect()
            self.smtp.send_message(m)
        except smtplib.SMTPRecipientsRefused as e:
            svc.log.warning("no mail to %r: the SMTP server refused it (%s)", to, e)
            self.refused += 1
        except (OSError, smtplib.SMTPException) as e:
            svc.log.warning("mail waits: the SMTP server %s:%s failed (%s); trying again in %.0f s",
                            svc.smtp_host, svc.smtp_port, e, svc.mail_interval)
            self.smtp = None
            return False
        return True
