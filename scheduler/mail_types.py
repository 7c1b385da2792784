"""Which changes of a workload its owner asked to be mailed about (Slurm's ``--mail-type``).

The scheduler only records the wish (``metadata["mail"]``, set by ComputeHub, not by a
submission's own metadata); the service's mailer (hub_ext/mail.py) sends the mails.
"""

from __future__ import annotations

from .errors import Conflict, ValidationError
from .model import MAIL, TERMINAL

BEGIN, END, FAIL, REQUEUE = "begin", "end", "fail", "requeue"
TYPES = (BEGIN, END, FAIL, REQUEUE)
ALL = "all"
HELP = ("begin (it started), end (it ended, however), fail (it failed), requeue (preempted or its "
        "node lost: back in line), or all")


def parse(value) -> list[str]:
    """The mail types of a submission's ``mail`` (a list, or one comma-separated text), sorted
    in TYPES' order; [] for none. Raises ``ValidationError`` naming what is wrong."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"mail must be a list of mail types: {HELP}")
    wanted = {v.strip().lower() for v in value}
    unknown = sorted(wanted - set(TYPES) - {ALL})
    if unknown:
        raise ValidationError(f"unknown mail type {unknown[0]!r}; one of {HELP}")
    return list(TYPES) if ALL in wanted else [t for t in TYPES if t in wanted]


class MailWishes:
    """The part of ``Scheduler`` that changes what live work mails its owner about (Slurm's
    ``scontrol update JobId=… MailType=``). Needs ``get``, ``array_tasks``, ``store``, ``_now``,
    ``_tx`` and ``_event``."""

    def set_mail(self, workload_id: str, mail, now=None, actor: str = "") -> list:
        """From now on mail ``parse(mail)`` of the workload ([] or "none": nothing); for a task of a
        job array, of every live task (the array mails as one). Returns the workloads changed;
        Conflict for work that has ended."""
        types = [] if mail in ("none", ["none"]) else parse(mail)
        w = self.get(workload_id)
        if w.state in TERMINAL:
            raise Conflict(f"workload {workload_id} is {w.state}: there is nothing left to mail about")
        changed = self.array_tasks(w.array["id"]) if w.array is not None else [w]
        now = self._now(now)
        with self._tx():
            for t in changed:
                t.metadata = {k: v for k, v in t.metadata.items() if k != MAIL}
                if types:
                    t.metadata[MAIL] = types
            self.store.put_workloads(changed)
            self._event(now, "mail_updated", w, ", ".join(types) or "none", actor=actor, mail=types,
                        **({"array": w.array["id"]} if w.array is not None else {}))
        return changed
