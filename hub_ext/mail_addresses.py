"""Users' own mail addresses (Slurm's ``--mail-user``), in the mail domains the admin allows.

By default the admin decides where a user's mail goes (``mail_address``, ``mail_addresses``).
Where the admin names domains in ``mail_user_domains``, a user may give an address of their
own in one of them (``computehub mail-address ada@lab.example.org``, ``PUT
api/v1/me/mail-address``), and ComputeHub's mails about their work go there from then on.
Domains only, never any address: a user must not be able to send ComputeHub's mail to
strangers. The addresses are kept in the database (``meta`` key ``mail_user_addresses``) and
each change is in the audit log (``mail_address_set``). Mixed into ``Mail``.
"""

from __future__ import annotations

import json
import re

from traitlets import HasTraits, List, Unicode, validate

from scheduler.config_checks import ConfigError
from scheduler.errors import ValidationError
from scheduler.model import Event

META_KEY = "mail_user_addresses"    # meta: {user: address}
MAX_ADDRESS = 254                   # the longest address SMTP carries (RFC 5321)
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"^(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})+\Z")
_LOCAL = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*\Z")


class OwnMailAddresses(HasTraits):
    """Needs ``sched`` (its store)."""

    mail_user_domains = List(
        Unicode(), config=True,
        help="""Mail domains in which users may give their own address for ComputeHub's mails about
        their work (`computehub mail-address ADDRESS`), instead of the one `mail_address` or
        `mail_addresses` makes: ['example.org'] allows ada@example.org and ada@lab.example.org;
        ['*'] any domain. Empty (the default): users cannot choose; the admin's addresses decide.""")

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
        if not self.mail_user_domains:
            raise ValidationError("this ComputeHub does not let users choose where their mail goes (its admin "
                                  "sets ComputeHubService.mail_user_domains)")
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
