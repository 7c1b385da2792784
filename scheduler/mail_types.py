"""Which changes of a workload its owner asked to be mailed about (Slurm's ``--mail-type``).

The scheduler only records the wish (``metadata["mail"]``, set by ComputeHub, not by a
submission's own metadata); the service's mailer (hub_ext/mail.py) sends the mails.
"""

from __future__ import annotations

from .errors import ValidationError
from .model import MAIL  # noqa: F401 - the metadata key, where callers look for it

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
