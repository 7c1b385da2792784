"""``computehub hold``, ``computehub release``, ``computehub array-limit``, ``computehub mail`` and
``computehub mail-address``: keep waiting work from starting, let it go, say how many of a job
array's tasks may run at a time, what live work mails about, and where the mail goes."""

from __future__ import annotations

import json
import time

from traitlets import Bool, Unicode

from .cli import UsageError
from .cli_client import ClientCommand, for_each_id, parse_begin
from .cli_client_arrays import ARRAY_FLAG, by_index
from .cli_each import act_on_arrays, printable


class HoldApp(ClientCommand):
    name = "computehub hold"
    description = ("computehub hold ID [ID ...] [--reason TEXT]: keep waiting workloads from starting. They "
                   "stay accepted, keep their ids, and start only once released ('computehub release'); "
                   "a hold by an admin only an admin releases. Each failure is one line on stderr.")
    examples = """
computehub hold w0000042 --reason "data not ready"
computehub hold w0000042 --until 22:00      # it joins the line by itself then
computehub hold --array w0000050             # the array's tasks that have not started
computehub release w0000042
"""
    positional, usage_args = -1, "one or more workload ids"
    reason = Unicode("", help="Why it is held (text, shown with it).").tag(config=True)
    until = Unicode("", help=(
        "Hold it until this time only, then it joins the line by itself (Slurm's scontrol update StartTime=): 2h "
        "from now, 22:00, midnight, tomorrow, or 2025-01-31T02:00 (local time). Changes the time of a hold "
        "you could release.")).tag(config=True)
    array = Bool(False, help=ARRAY_FLAG).tag(config=True)
    aliases = {**ClientCommand.aliases, "reason": "HoldApp.reason", "until": "HoldApp.until"}
    flags = {"array": ({"HoldApp": {"array": True}}, ARRAY_FLAG)}

    def run(self, *ids):
        ch = self.client()
        if self.until.strip():
            parse_begin(self.until, time.time(), "--until")          # a mistake is said before asking anyone
        until = parse_begin(self.until, ch.now(), "--until") if self.until.strip() else None
        if self.array:
            return act_on_arrays(ch, ids, "hold", self.reason, until=until)
        return for_each_id(ids, by_index(ch, lambda wid: ch.hold(wid, self.reason, until)),
                           lambda w: f"{w['id']}  {w['state']}  ({w['reason']})")


class ReleaseApp(ClientCommand):
    name = "computehub release"
    description = ("computehub release ID [ID ...]: let held workloads join the line (their wait counts from "
                   "now). Work that also runs after other work stays held until that has ended.")
    examples = """
computehub release w0000042 w0000043
computehub release --array w0000050
"""
    positional, usage_args = -1, "one or more workload ids"
    array = Bool(False, help=ARRAY_FLAG).tag(config=True)
    aliases = dict(ClientCommand.aliases)
    flags = {"array": ({"ReleaseApp": {"array": True}}, ARRAY_FLAG)}

    def run(self, *ids):
        ch = self.client()
        if self.array:
            return act_on_arrays(ch, ids, "release")
        return for_each_id(ids, by_index(ch, ch.release),
                           lambda w: f"{w['id']}  {w['state']}" + (f"  ({w['reason']})" if w["reason"] else ""))


class TopApp(ClientCommand):
    name = "computehub top"
    description = ("computehub top ID [ID ...]: put waiting workloads first among your own waiting work of "
                   "their queue and priority class, the first named first (Slurm's scontrol top). They take the "
                   "best places your work had there; everyone else's work keeps its place.")
    examples = """
computehub top w0000042                # my eval job before my other sweeps
computehub top w0000042 w0000040       # w0000042 first, then w0000040, then the rest of mine
computehub top --array w0000050        # the array's waiting tasks, in index order
"""
    positional, usage_args = -1, "one or more workload ids"
    array = Bool(False, help=ARRAY_FLAG).tag(config=True)
    aliases = dict(ClientCommand.aliases)
    flags = {**ClientCommand.flags, "array": ({"TopApp": {"array": True}}, ARRAY_FLAG)}

    def run(self, *ids):
        ch, lines = self.client(), []
        if self.array:          # (an array named first goes first: put first last)
            return act_on_arrays(ch, list(reversed(ids)), "top")

        def line(w: dict) -> str:
            return json.dumps(w) if self.json else \
                f"{w['id']}  {w['state']}  first among your {w['priority']} work in queue {w['queue']}"
        # The last put first goes first: the first named is put first last.
        rc = for_each_id(list(reversed(ids)), by_index(ch, ch.top), line, lines)
        print("\n".join(reversed(lines)), end="\n" if lines else "")
        return rc


class ArrayLimitApp(ClientCommand):
    name = "computehub array-limit"
    description = ("computehub array-limit ID N: from now on run at most N of job array ID's tasks at a time "
                   "(0: no limit; ID: the array's, or any of its tasks). Tasks running beyond a lowered limit go "
                   "on; no new one starts until fewer run.")
    examples = """
computehub array-limit w0000050 8
computehub array-limit w0000050 0      # no limit
"""
    positional, usage_args = 2, "a job array's id and a number of tasks"
    aliases = dict(ClientCommand.aliases)
    flags = dict(ClientCommand.flags)

    def run(self, wid, limit):
        if not limit.isdigit():
            raise UsageError(f"the limit is a whole number of tasks (0: no limit), not {limit!r}")
        answer = self.client().array_limit(wid, int(limit))
        if self.json:
            return self.emit(answer)
        cap = f"at most {answer['limit']} at a time" if answer["limit"] else "no limit"
        n = len(answer["tasks"])
        print(f"array {answer['array']}: {cap} ({n} task{'s' if n != 1 else ''} waiting or running)")
        return None


class MailApp(ClientCommand):
    name = "computehub mail"
    description = ("computehub mail ID TYPES: from now on mail me about workload ID's begin, end, fail or "
                   "requeue (commas between them), all of them, or none (Slurm's scontrol update "
                   "MailType=). For a task of a job array, the whole array's mail.")
    examples = """
computehub mail w0000042 end,fail      # going home: tell me how it ends
computehub mail w0000042 none
"""
    positional, usage_args = 2, "a workload id and mail types (begin, end, fail, requeue, all or none)"
    aliases = dict(ClientCommand.aliases)
    flags = dict(ClientCommand.flags)

    def run(self, wid, types):
        w = self.client().set_mail(wid, [] if types.strip().lower() == "none" else types)
        if self.json:
            return self.emit(w)
        mail = ", ".join((w.get("metadata") or {}).get("mail", [])) or "none"
        tasks = len(w.get("tasks", []))
        each = f" (each of the array's {tasks} live tasks)" if w.get("array") else ""
        print(f"{w['id']}  {w['state']}  mail: {mail}{each}")
        return None


class MailAddressApp(ClientCommand):
    name = "computehub mail-address"
    description = ("computehub mail-address [ADDRESS | none]: where ComputeHub's mails about your work go. With "
                   "no argument, say where; with an address in a domain the admin allows, send them there from "
                   "now on (Slurm's --mail-user), once you give back the code mailed there (--confirm CODE); "
                   "'none' goes back to the address the admin set for you.")
    examples = """
computehub mail-address                            # where my mail goes
computehub mail-address ada@lab.example.org        # a code goes there
computehub mail-address --confirm 12345678         # the code: mail goes there from now on
computehub mail-address none                       # the admin's address again
"""
    positional, usage_args = -1, ""
    confirm = Unicode("", help="The code mailed to the address you gave: mail goes there from now on.").tag(
        config=True)
    aliases = {**ClientCommand.aliases, "confirm": "MailAddressApp.confirm"}
    flags = dict(ClientCommand.flags)

    def args(self) -> list[str]:
        if len(self.extra_args) > 1:
            raise UsageError(f"unexpected argument {self.extra_args[1]!r}: give one address, or none "
                             f"(see '{self.name} --help')")
        return list(self.extra_args)

    def run(self, address: str | None = None):
        ch = self.client()
        if self.confirm and address is not None:
            raise UsageError("give an address, or --confirm the code mailed to the one you gave; not both")
        if self.confirm:
            me = ch.confirm_mail_address(self.confirm)
        elif address is None:
            me = ch.me()
        else:
            me = ch.set_mail_address("" if address.strip().lower() == "none" else address)
        if self.json:
            return self.emit(me)
        print(mail_address_line(me))
        return None


def mail_address_line(me: dict) -> str:
    """``mail goes to ada@lab.example.org (yours; ...)`` or why none goes anywhere; and the address
    that waits for its code, if any."""
    domains = me.get("mail_user_domains") or []
    choose = ("any domain" if "*" in domains else ", ".join(domains)) if domains else ""
    if not me.get("mail_address"):
        line = "no mail address: " + (f"give yours, in {choose}" if choose else "this ComputeHub mails you nowhere "
                                      "(its admin sets where mail goes)")
    else:
        whose = "yours" if me.get("mail_address_own") else "the admin's"
        other = f"; you may give another in {choose}" if choose else ""
        line = f"mail goes to {printable(me['mail_address'])} ({whose}{other})"
    if me.get("mail_address_pending"):
        line += (f"\na code went to {printable(me['mail_address_pending'])}: mail goes there once you give it "
                 "back, within a day (computehub mail-address --confirm CODE)")
    return line
