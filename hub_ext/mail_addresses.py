"""Users' own mail addresses (Slurm's ``--mail-user``), in the mail domains the admin allows.

By default the admin decides where a user's mail goes (``mail_address``, ``mail_addresses``).
Where the admin names domains in ``mail_user_domains``, a user may give an address of their
own in one of them (``computehub mail-address ada@lab.example.org``, ``PUT
api/v1/me/mail-address``), and ComputeHub's mails about their work go there from then on.
Domains only, never any address: a user must not be able to send ComputeHub's mail to
strangers. The addresses are kept in the database (``meta`` key ``mail_user_addresses``) and
each change is in the audit log (``mail_address_set``). Mixed into ``Mail``.

And only an address its owner confirmed (``mail_address_confirmation``, on by default): a new
address gets a mail with a code, and mail goes there once the user gives that code back
(``computehub mail-address --confirm CODE``, ``POST api/v1/me/mail-address/confirm``); until then
it goes where it went. Otherwise anyone could send ComputeHub's mail to a colleague in an
allowed domain. A code is good for ``CONFIRM_S`` seconds and ``CONFIRM_TRIES`` tries; a user
gets a new code at most once every ``RESEND_S`` seconds and ``CODES_PER_DAY`` times a day, so
nobody can flood an address with codes. Only the code's hash is kept (``meta`` key
``mail_user_pending``), and the audit log has each request (``mail_address_requested``), never
the code.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets

from traitlets import Bool, HasTraits, List, Unicode, validate

from scheduler.config_checks import ConfigError
from scheduler.errors import SchedulerError, ValidationError
from scheduler.model import Event

META_KEY = "mail_user_addresses"    # meta: {user: address}
PENDING_KEY = "mail_user_pending"   # meta: {user: {"address", "code_sha256", "at", "tries", "sent": [times]}}
CONFIRM_S = 86400.0                 # how long a code is good for
CONFIRM_TRIES = 5                   # wrong codes before a code is void
RESEND_S = 60.0                     # the least time between two codes for one user
CODES_PER_DAY = 5                   # codes one user may have sent in a day
MAX_ADDRESS = 254                   # the longest address SMTP carries (RFC 5321)
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"^(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})+\Z")
_LOCAL = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*\Z")


class TooSoon(SchedulerError):
    """Another code asked for too soon, or too many in a day."""

    code = "too_many_requests"
    status = 429


class OwnMailAddresses(HasTraits):
    """Needs ``sched`` (its store)."""

    mail_user_domains = List(
        Unicode(), config=True,
        help="""Mail domains in which users may give their own address for ComputeHub's mails about
        their work (`computehub mail-address ADDRESS`), instead of the one `mail_address` or
        `mail_addresses` makes: ['example.org'] allows ada@example.org and ada@lab.example.org;
        ['*'] any domain. Empty (the default): users cannot choose; the admin's addresses decide.""")
    mail_address_confirmation = Bool(
        True, config=True,
        help="""Whether an address a user gives (`mail_user_domains`) is used only once they confirm it
        with the code ComputeHub mails there (`computehub mail-address --confirm CODE`; good for a
        day). Off: used at once, so anyone may send ComputeHub's mail to any address in those
        domains.""")

    @validate("mail_user_domains")
    def _mail_user_domains(self, proposal):
        out = []
        for d in proposal.value:
            d = d.strip().lower().lstrip("@")
            if d != "*" and not _DOMAIN.match(d):
                raise ConfigError(f"ComputeHubService.mail_user_domains: {d!r} is not a domain name such as "
                                  "'example.org' (or '*' for any)")
            out.append(d)
        return out

    @property
    def _own_addresses(self) -> dict[str, str]:
        """Each user's own address, read from the database once (then kept here, where each change is
        made: one service writes them)."""
        own = self.__dict__.get("_own_addresses_d")
        if own is None:
            if getattr(self, "sched", None) is None:
                return {}           # configured, not started: no database to have kept any in
            raw = self.sched.store.get_meta(META_KEY)
            own = self.__dict__["_own_addresses_d"] = json.loads(raw) if raw else {}
        return own

    def own_address(self, user: str) -> str:
        """The address ``user`` gave ("" for none, or where users may no longer choose)."""
        return self._own_addresses.get(user, "") if self.mail_user_domains else ""

    def check_own_address(self, address) -> str:
        """``address`` as kept ("" to forget one), or ValidationError saying what is wrong with it."""
        if not isinstance(address, str):
            raise ValidationError('send {"address": "ada@lab.example.org"}, or "" to go back to the admin\'s')
        address = address.strip()
        if not address:
            return ""
        local, at, domain = address.rpartition("@")
        domain = domain.lower()
        if not at or len(address) > MAX_ADDRESS or not _LOCAL.match(local) or len(local) > 64 \
                or not _DOMAIN.match(domain):
            raise ValidationError(f"{address[:100]!r} is not a mail address such as ada@lab.example.org")
        domains = self.mail_user_domains
        if "*" not in domains and not any(domain == d or domain.endswith("." + d) for d in domains):
            raise ValidationError(f"ComputeHub mails addresses in {', '.join(domains)} only, not in {domain} "
                                  "(its admin sets ComputeHubService.mail_user_domains)")
        return f"{local}@{domain}"

    def set_own_address(self, user: str, address, actor: str) -> str:
        """Keep ``address`` (checked: ``check_own_address``) as ``user``'s own; "" forgets it. Returns
        what was kept. Written to the database with its audit event, then here."""
        self._check_choosing()
        address = self.check_own_address(address)
        own = dict(self._own_addresses)
        before = own.pop(user, "")
        if address:
            own[user] = address
        store = self.sched.store
        with store.transaction():
            store.set_meta(META_KEY, json.dumps(own, sort_keys=True))
            store.add_event(Event(self.sched.clock(), "mail_address_set", None, address or "the admin's",
                                  {"actor": actor, "user": user, "before": before, "after": address}))
        self.__dict__["_own_addresses_d"] = own      # replaced whole: the mail thread reads it meanwhile
        return address

    # --- confirmation -------------------------------------------------------------------------

    @property
    def _pending(self) -> dict[str, dict]:
        """Each user's address waiting for its code (read from the database once, kept here)."""
        pending = self.__dict__.get("_pending_d")
        if pending is None:
            if getattr(self, "sched", None) is None:
                return {}
            raw = self.sched.store.get_meta(PENDING_KEY)
            pending = self.__dict__["_pending_d"] = json.loads(raw) if raw else {}
        return pending

    def pending_address(self, user: str) -> str:
        """The address ``user`` gave that waits for its code ("" for none, or one whose code expired)."""
        p = self._pending.get(user)
        if not p or not p.get("address") or self.sched.clock() - p["at"] > CONFIRM_S:
            return ""
        return p["address"]

    def start_confirmation(self, user: str, address) -> str:
        """``address`` as it would be kept (checked: ``set_own_address``) when it waits for a code
        mailed to it first, the code's send counted from now (before it is mailed: requests at
        once all count); "" when it is kept at once (confirmation off, the admin's again, or the
        address already in use). Refuses (429) a new code sooner than ``RESEND_S`` after the last,
        or beyond ``CODES_PER_DAY`` a day."""
        self._check_choosing()
        address = self.check_own_address(address)
        if not self.mail_address_confirmation or not address or address == self.own_address(user):
            return ""
        now = self.sched.clock()
        sent = [t for t in self._pending.get(user, {}).get("sent", ()) if t > now - 86400]
        if sent and now - sent[-1] < RESEND_S:
            raise TooSoon(f"a code went out {now - sent[-1]:.0f} s ago: wait {RESEND_S - (now - sent[-1]):.0f} s "
                          "before asking for another (or give that one: computehub mail-address --confirm CODE)")
        if len(sent) >= CODES_PER_DAY:
            raise TooSoon(f"{CODES_PER_DAY} codes went out in the last day, the most there may be: ask again "
                          "tomorrow, or give the last one")
        pending = dict(self._pending)
        pending[user] = {**pending.get(user, {}), "sent": sent + [now]}
        self._write_pending(pending)
        return address

    @staticmethod
    def new_code() -> str:
        return f"{secrets.randbelow(10 ** 8):08d}"

    def keep_pending(self, user: str, address: str, code: str, actor: str) -> None:
        """``address`` waits for ``code`` (mailed to it: ``Mail.mail_code``), in place of any earlier one
        (its send counted by ``start_confirmation``)."""
        now = self.sched.clock()
        pending = dict(self._pending)
        sent = pending.get(user, {}).get("sent", [])
        pending[user] = {"address": address, "code_sha256": _digest(code), "at": now, "tries": 0, "sent": sent}
        self._write_pending(pending, Event(now, "mail_address_requested", None, address,
                                           {"actor": actor, "user": user, "address": address}))

    def confirm_own_address(self, user: str, code, actor: str) -> str:
        """The address ``user`` gave is theirs from now on, if ``code`` is the one mailed to it.
        Returns it; ValidationError saying what is wrong otherwise (a wrong code counts a try)."""
        self._check_choosing()
        if not isinstance(code, str) or not code.strip():
            raise ValidationError('send {"code": "12345678"}: the code mailed to the address you gave')
        p = self._pending.get(user)
        address = self.pending_address(user)
        if not address:
            gone = " (its code has expired: give the address again)" if p and p.get("address") else ""
            raise ValidationError(f"no address of yours waits for a code{gone}; give one with computehub "
                                  "mail-address ADDRESS", code="nothing_to_confirm")
        if not hmac.compare_digest(p["code_sha256"], _digest(code)):
            pending = dict(self._pending)
            tries = p["tries"] + 1
            left = CONFIRM_TRIES - tries
            pending[user] = {**p, "tries": tries} if left > 0 else {"sent": p.get("sent", [])}
            self._write_pending(pending)
            raise ValidationError(f"that is not the code mailed to {address}: " + (
                f"{left} tries left" if left > 0 else "no tries left; give the address again for a new code"))
        self.set_own_address(user, address, actor)
        # The day's sends stay counted: confirming an address of one's own must not open the way to
        # more codes for someone else's.
        self._write_pending({**self._pending, user: {"sent": p.get("sent", [])}})
        return address

    def _check_choosing(self) -> None:
        if not self.mail_user_domains:
            raise ValidationError("this ComputeHub does not let users choose where their mail goes (its admin "
                                  "sets ComputeHubService.mail_user_domains)")

    def _write_pending(self, pending: dict, event: Event | None = None) -> None:
        store = self.sched.store
        with store.transaction():
            store.set_meta(PENDING_KEY, json.dumps(pending, sort_keys=True))
            if event is not None:
                store.add_event(event)
        self.__dict__["_pending_d"] = pending


def _digest(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()
