"""Report tokens: what a running job holds to say it saved a checkpoint, and nothing more.

A job on Kubernetes runs in a pod that carries no hub token (the service-account token
is not mounted either), and the launcher cannot see the pod's volume to notice its saves.
So each workload gets a token of its own, ``COMPUTEHUB_REPORT_TOKEN`` in the job's
environment, that the service accepts on one endpoint only: ``POST
api/v1/workloads/{id}/checkpoint`` for that one workload. It lets nobody read, submit or
cancel anything; a stolen one can at most claim that the job saved (which makes the job
look cheaper to preempt).

The token is an HMAC of the workload id and its run (``scheduler.model.run_label``: its
admission time, new each time it is admitted again after a preemption or a lost node) under
a secret the service keeps in its database (``meta`` table), so every replica and every
restart of the service accepts the tokens it handed out before, and nothing per workload is
stored. A token dies with its run: a process left over from an earlier run, or a token read from an old job's
environment, reports nothing for the run that holds the GPUs now.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "chrt_"                 # tells a report token from a hub token at a glance
_META_KEY = "report_token_secret"


def load_secret(store) -> bytes:
    """The service's signing secret, made and stored on first use."""
    value = store.get_meta(_META_KEY)
    if value is None:
        with store.transaction():
            if store.get_meta(_META_KEY) is None:
                store.set_meta(_META_KEY, secrets.token_hex(32))
        value = store.get_meta(_META_KEY)
    return value.encode()


class ReportTokens:
    def __init__(self, secret: bytes):
        self._secret = secret
        self._issued: dict[tuple[str, str], str] = {}   # launchers list thousands of workloads a look

    def issue(self, workload_id: str, run: str) -> str:
        token = self._issued.get((workload_id, run))
        if token is None:
            if len(self._issued) >= 100_000:
                self._issued.clear()
            token = self._issued[(workload_id, run)] = self._token(workload_id, run)
        return token

    def valid(self, token: str, workload_id: str, run: str) -> bool:
        # Not through issue's cache: any caller may name any id here.
        return hmac.compare_digest(token.encode(), self._token(workload_id, run).encode())

    def _token(self, workload_id: str, run: str) -> str:
        mac = hmac.new(self._secret, f"checkpoint:{workload_id}:{run}".encode(), hashlib.sha256)
        return PREFIX + mac.hexdigest()


def bearer(authorization: str) -> str | None:
    """The report token in an ``Authorization: token chrt_…`` (or ``Bearer``) header, if any."""
    kind, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if kind.lower() in ("token", "bearer") and value.startswith(PREFIX):
        return value
    return None
