"""What each mail says: the change of a workload (or of a whole job array) its owner asked to
hear of (``scheduler.mail_types``), as plain text, with the commands that show more."""

from __future__ import annotations

import textwrap
import time
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from scheduler.mail_types import BEGIN, END, FAIL, REQUEUE

SUBJECT_PREFIX = "[ComputeHub]"
WIDTH = 76          # plain text mail: lines a mail reader shows without wrapping them itself


def when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "-"


def span(seconds: float) -> str:
    """``2 h 05 min``, ``4 min``, ``12 s``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    h, m = divmod(seconds // 60, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def title(w) -> str:
    """``train (w0000042)``, or the id alone for unnamed work."""
    return f"{w.name} ({w.id})" if w.name else w.id


def what_happened(kind: str, w) -> str:
    """The subject's verb for one workload."""
    if kind == BEGIN:
        return "started"
    if kind == REQUEUE:
        return "is back in line"
    if w.state == "failed":
        return f"failed (exit code {w.exit_code})" if w.exit_code is not None else "failed"
    return w.state if w.state == "finished" else f"was {w.state}"


def workload_mail(kind: str, w, event, service_url: str) -> tuple[str, str]:
    """(subject, body) of one workload's mail."""
    verb = what_happened(kind, w)
    lines = [f"Hello {w.user},", "",
             *textwrap.wrap(f"your {w.kind} job {title(w)} {verb} at {when(event.time)}.", WIDTH), ""]
    if event.reason:
        lines += [f"  why:        {event.reason}"]
    lines += [f"  queue:      {w.queue}, {w.gpus} GPU{'' if w.gpus == 1 else 's'}",
              f"  submitted:  {when(w.submitted_at)}"]
    if w.started_at:
        lines += [f"  started:    {when(w.started_at)}"]
    if kind in (END, FAIL) and w.ended_at:
        ran = f" (ran {span(w.ended_at - w.started_at)})" if w.started_at else " (never started)"
        lines += [f"  ended:      {when(w.ended_at)}{ran}"]
    if w.preemptions:
        lines += [f"  preempted:  {w.preemptions} time(s)"]
    lines += ["", "  computehub jobs --all         where your jobs stand, this one among them",
              f"  computehub logs {w.id}      its log"]
    return f"{SUBJECT_PREFIX} {title(w)} {verb}", "\n".join(lines + footer(w, service_url))


def array_mail(kind: str, first, counts: dict[str, int], at: float, service_url: str,
               reason: str = "") -> tuple[str, str]:
    """(subject, body) of a job array's one mail: its first task started (BEGIN), a task is back
    in line (REQUEUE: ``first`` is that task, ``reason`` why; one such mail an hour), or none of
    its tasks is live any more (END: how they ended, the last at ``at``)."""
    aid = first.array["id"]
    name = f"{first.name} {aid}" if first.name else aid
    if kind == BEGIN:
        verb = "started"
        said = f"the first of its {first.array['size']} tasks started at {when(at)}."
    elif kind == REQUEUE:
        verb = f"task {first.array['index']} is back in line"
        said = (f"task {first.array['index']} ({first.id}) is back in line since {when(at)}"
                f"{': ' + reason if reason else ''}. Other tasks of it that are back in line within the "
                "hour are not mailed; its last mail says how all its tasks ended.")
    else:
        ended = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        verb = f"ended ({ended})"
        said = f"all its {sum(counts.values())} tasks have ended, the last at {when(at)}: {ended}."
    lines = [f"Hello {first.user},", "", *textwrap.wrap(f"your job array {name}: {said}", WIDTH), "",
             f"  queue:      {first.queue}",
             "", f"  computehub jobs --array {aid}       its tasks and how each ended"]
    return f"{SUBJECT_PREFIX} job array {name} {verb}", "\n".join(lines + footer(first, service_url))


def footer(w, service_url: str) -> list[str]:
    lines = ["", "-- ", f"ComputeHub{' at ' + service_url if service_url else ''}",
             "You get this mail because the job asked for it (mail: "
             f"{', '.join(w.metadata.get('mail', []))})."]
    return lines


def confirm_mail(user: str, code: str, hours: float, service_url: str) -> tuple[str, str]:
    """(subject, body) of the mail that asks the owner of an address a user gave to confirm it."""
    lines = ["Hello,", "", *textwrap.wrap(
        f"the ComputeHub user {user} asked that ComputeHub's mails about their work go to this "
        "address. If that was you, confirm it with:", WIDTH), "",
        f"  computehub mail-address --confirm {code}", "",
        *textwrap.wrap(f"The code is good for {hours:g} hours. If it was not you, ignore this mail: "
                       "no mail about anyone's work comes here unless the code is given.", WIDTH),
        "", "-- ", f"ComputeHub{' at ' + service_url if service_url else ''}"]
    return f"{SUBJECT_PREFIX} confirm your mail address", "\n".join(lines)


def message(sender: str, to: str, subject: str, body: str) -> EmailMessage:
    """The mail itself. ``to`` is checked to be one plain address: a user name in it (the
    admin's ``mail_address`` template) cannot add a header or a second recipient."""
    m = EmailMessage()
    m["From"] = sender
    m["To"] = Address(addr_spec=to)          # ValueError (or a HeaderParseError) for anything else
    m["Subject"] = subject
    m["Date"] = formatdate(usegmt=True)
    m["Message-ID"] = make_msgid(domain="computehub")
    m["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies back, please
    m.set_content(body)
    return m
