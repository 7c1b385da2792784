"""A small Python client for the ComputeHub REST API, authenticated through JupyterHub.

    from hub_ext.client import ComputeHubClient
    ch = ComputeHubClient()                   # in a notebook: URL and token from the environment
    w = ch.submit(kind="training", gpus=2, time_limit=3600)
    ch.get(w["id"])["explanation"]["reason"]

Every method returns the service's JSON as it was sent (see docs/service.md).
Errors raise ``ComputeHubError`` carrying the HTTP status, the server's error
code and its message; a service that cannot be reached, a missing URL or a
missing token raise it too, with ``status`` None and a message saying what to do.

Defaults: the URL of the service from ``$COMPUTEHUB_URL``, else the hub's public
URL (``$JUPYTERHUB_PUBLIC_HUB_URL``, set by JupyterHub 5+ in servers it spawns,
or ``$JUPYTERHUB_URL``) + ``/services/computehub``; the token from
``$COMPUTEHUB_TOKEN``, else ``$JUPYTERHUB_API_TOKEN`` (set in every server and
service the hub starts).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from email.utils import parsedate_to_datetime
from urllib.parse import quote

SERVICE = "services/computehub"
TOKEN_HELP = ("no API token: set $COMPUTEHUB_TOKEN (or $JUPYTERHUB_API_TOKEN) to a token from the hub's "
              "token page (<hub>/hub/token), or pass --token")
URL_HELP = ("no ComputeHub URL: set $COMPUTEHUB_URL to the service's URL, e.g. "
            "https://hub.example.org/services/computehub, or pass --url")


class ComputeHubError(Exception):
    """``status`` is the HTTP status (None when no answer came), ``code`` the server's error code."""

    def __init__(self, status: int | None, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def __str__(self) -> str:
        return self.message


def default_url(env=os.environ) -> str | None:
    if env.get("COMPUTEHUB_URL"):
        return env["COMPUTEHUB_URL"]
    hub = env.get("JUPYTERHUB_PUBLIC_HUB_URL")        # https://hub.example.org/prefix/hub/
    if hub:
        base = hub.rstrip("/")
        return (base[: -len("/hub")] if base.endswith("/hub") else base) + "/" + SERVICE
    hub = env.get("JUPYTERHUB_URL")                   # the hub's public URL
    if hub:
        return hub.rstrip("/") + "/" + SERVICE
    return None


def default_token(env=os.environ) -> str | None:
    return env.get("COMPUTEHUB_TOKEN") or env.get("JUPYTERHUB_API_TOKEN") or None


def report_checkpoint(at: float | None = None, on_stop: bool = False, env=os.environ, timeout: float = 30.0) -> dict:
    """From inside a job the launcher started: "I just saved a checkpoint". Uses the job's
    $COMPUTEHUB_WORKLOAD_ID, $COMPUTEHUB_REPORT_TOKEN (good for this report only) and
    $COMPUTEHUB_URL, all set by the launcher::

        torch.save(state, path)
        report_checkpoint()
    """
    wid = env.get("COMPUTEHUB_WORKLOAD_ID")
    if not wid:
        raise ComputeHubError(None, "no_workload", "not inside a ComputeHub job ($COMPUTEHUB_WORKLOAD_ID is "
                                                   "not set); name the workload")
    token = env.get("COMPUTEHUB_REPORT_TOKEN") or default_token(env)
    return ComputeHubClient(default_url(env), token, timeout=timeout).report_checkpoint(wid, at=at, on_stop=on_stop)


def save_on_preemption(save, exit_code: int = 143, env=os.environ) -> None:
    """From inside a job: when it is told to stop (SIGTERM: preempted, or its node drained),
    call ``save()``, tell the scheduler the job saved on stop, and exit with ``exit_code``
    (143, as killed by SIGTERM: the work did not finish). The scheduler then knows this job
    saves on stop (``saves_on_stop``): preempting it again loses only its restart, so it is
    swapped out at once rather than at its next periodic save. The report is best effort
    (5 seconds at most, within the grace period); a failing ``save()`` is not reported::

        save_on_preemption(lambda: torch.save(model.state_dict(), f"{ckpt}/last.pt"))
    """
    def stop(signum, frame):
        save()
        try:
            report_checkpoint(on_stop=True, env=env, timeout=5.0)
        except ComputeHubError as e:
            print(f"computehub: the save on stop was not reported: {e.message}", file=sys.stderr, flush=True)
        sys.exit(exit_code)

    signal.signal(signal.SIGTERM, stop)


def _with_resources(body: dict, gpus, cpu, memory) -> dict:
    """``body`` with the ``gpus``, ``cpu`` and ``memory`` shorthands (None: not given) in its resources."""
    resources = dict(body.pop("resources", None) or {})
    resources.update((k, v) for k, v in (("gpu", gpus), ("cpu", cpu), ("memory", memory)) if v is not None)
    return {**body, "resources": resources} if resources else body


def _clean(params: dict) -> dict:
    return {k: v for k, v in params.items() if v is not None}


class ComputeHubClient:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0):
        url = url or default_url()
        if not url:
            raise ComputeHubError(None, "no_url", URL_HELP)
        if not url.startswith(("http://", "https://")):
            raise ComputeHubError(None, "no_url", f"the ComputeHub URL must start with http:// or https://, "
                                                  f"not {url!r}")
        self.url = url.rstrip("/")
        self.api = self.url + "/api/v1/"
        self.token = token or default_token()
        if not self.token:
            raise ComputeHubError(None, "no_token", TOKEN_HELP)
        self.timeout = timeout
        import requests          # a dependency of jupyterhub; imported late so --help needs nothing

        self._requests = requests
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"token {self.token}", "Accept": "application/json"})
        # Seconds the service's clock is ahead of this machine's, from its last answer's Date header
        # (None before any): times it gives ("submitted at", "saved at") are counted on its clock.
        self.clock_offset: float | None = None

    def __repr__(self) -> str:
        return f"ComputeHubClient(url={self.url!r})"

    def now(self) -> float:
        """Now by the service's clock (to about a second: its Date header), so that "saved 4 min
        ago" and "--begin 2h" mean the same whatever this machine's clock says; asks the service
        once if it has not answered yet."""
        if self.clock_offset is None:
            self.me()
        return time.time() + (self.clock_offset or 0.0)

    def _note_clock(self, r) -> None:
        try:
            # The header says the second the answer was made: the middle of it, less the trip back.
            off = parsedate_to_datetime(r.headers["Date"]).timestamp() + 0.5 - time.time()
        except (KeyError, TypeError, ValueError, IndexError):
            return
        # Within the header's second the clocks agree as far as it can tell: this one is finer.
        self.clock_offset = off if abs(off) > 1.0 else 0.0

    # --- HTTP ---------------------------------------------------------------------

    def request(self, method: str, path: str, params: dict | None = None, body: dict | None = None):
        url = self.api + path
        rq = self._requests
        try:
            r = self.session.request(method, url, params=_clean(params or {}), json=body,
                                     timeout=self.timeout, allow_redirects=False)
        except rq.Timeout:
            raise ComputeHubError(None, "timeout", f"ComputeHub at {self.url} did not answer within "
                                                   f"{self.timeout:g} s") from None
        except rq.RequestException as e:
            raise ComputeHubError(None, "unreachable",
                                  f"cannot reach ComputeHub at {self.url}: {_root_cause(e)}") from None
        self._note_clock(r)
        if r.status_code == 204:
            return None
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code >= 400 or not isinstance(data, dict):
            raise self._error(r, data)
        return data

    def _error(self, r, data) -> ComputeHubError:
        status = r.status_code
        if isinstance(data, dict) and "message" in data:
            return ComputeHubError(status, str(data.get("error", "error")), str(data["message"]))
        if status == 404 or 300 <= status < 400:   # the hub redirects paths it does not route
            where = f"HTTP {status}" + (f" to {r.headers['Location']}" if r.headers.get("Location") else "")
            return ComputeHubError(status, "wrong_url", f"no ComputeHub service at {self.url} ({where}); "
                                   "check the URL ($COMPUTEHUB_URL or --url)")
        if status in (502, 503, 504):
            return ComputeHubError(status, "unavailable", f"ComputeHub at {self.url} is not running or "
                                   f"restarting (HTTP {status}); try again shortly")
        return ComputeHubError(status, "error", f"unexpected answer from {self.url}: HTTP {status}")

    def _get(self, path, **params):
        return self.request("GET", path, params=params)

    # --- the API ------------------------------------------------------------------

    def me(self) -> dict:
        return self._get("me")

    def set_mail_address(self, address: str) -> dict:
        """Where my mail goes from now on: an address in a domain the admin allows (``me()``'s
        ``mail_user_domains``); "" for the admin's address again."""
        return self.request("PUT", "me/mail-address", body={"address": address})

    def confirm_mail_address(self, code: str) -> dict:
        """The address I gave (``set_mail_address``) is where my mail goes from now on, with the code
        mailed to it."""
        return self.request("POST", "me/mail-address/confirm", body={"code": code})

    def submit(self, gpus: int | None = None, cpu=None, memory=None, **spec) -> dict:
        """Submit a workload: the fields of ``POST api/v1/workloads`` (kind, resources, queue,
        priority, workers, gpu_model, time_limit, checkpoint_every, name, ...); ``gpus``, ``cpu`` and ``memory``
        are shorthands for entries of ``resources``."""
        return self.request("POST", "workloads", body=_with_resources(spec, gpus, cpu, memory))

    def list(self, state=None, queue=None, user=None, kind=None, limit=None, offset=None, order=None,
             array=None, explain=False) -> dict:
        """``{"workloads": [...], "total", "offset", "limit", "order"}``; ``state`` may be a list;
        ``order="newest"`` pages from the latest submission back (the default is oldest first);
        ``array``: only the tasks of that job array (its first task's id); ``explain``: each waiting
        workload with its ``explanation`` (position, reason, start estimate)."""
        return self._get("workloads", state=state, queue=queue, user=user, kind=kind, limit=limit, offset=offset,
                         order=order, array=array, explain="true" if explain else None)

    def get(self, workload_id: str) -> dict:
        return self._get(f"workloads/{quote(str(workload_id), safe='')}")

    def cancel(self, workload_id: str) -> dict:
        return self.request("DELETE", f"workloads/{quote(str(workload_id), safe='')}")

    def update(self, workload_id: str, whole_array: bool = False, gpus: int | None = None, cpu=None,
               memory=None, dry_run: bool = False, states=None, **changes) -> dict:
        """Change waiting work (running work: its name, checkpoint_every, a shorter time_limit): the
        fields of ``PATCH api/v1/workloads/{id}`` (resources, workers, gpu_model, time_limit,
        checkpoint_every, queue, priority, name); ``gpus``, ``cpu`` and ``memory`` change single
        entries of its resources. ``whole_array``: every waiting task of its job array (``states``,
        e.g. ``["held"]``: only those in one of them). ``dry_run``: change nothing, answer what it
        would be, with ``explanation`` (its place and start then) beside ``explanation_before``."""
        params = {"tasks": "all" if whole_array else None, "dry_run": "true" if dry_run else None,
                  "state": list(states) if states else None}
        return self.request("PATCH", f"workloads/{quote(str(workload_id), safe='')}", params=params,
                            body=_with_resources(changes, gpus, cpu, memory))

    def hold(self, workload_id: str, reason: str = "", until: float | None = None) -> dict:
        """Keep waiting work from starting until ``release`` (``until``, a UNIX time: or until then)."""
        body = {k: v for k, v in (("reason", reason), ("until", until)) if v}
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/hold", body=body)

    def release(self, workload_id: str) -> dict:
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/release", body={})

    def top(self, workload_id: str) -> dict:
        """First among my own waiting work of its queue and class (Slurm's ``scontrol top``)."""
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/top", body={})

    def set_mail(self, workload_id: str, mail) -> dict:
        """What live work mails its owner about from now on: ``"end,fail"``, ``["all"]``; ``[]`` for
        nothing (for a job array's task, the whole array's)."""
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/mail", body={"mail": mail})

    def array_limit(self, workload_id: str, limit: int) -> dict:
        """Run at most ``limit`` tasks of the job array ``workload_id`` belongs to at a time (0: no limit)."""
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/array-limit",
                            body={"limit": limit})

    def array_action(self, workload_id: str, action: str, reason: str = "", states=None,
                     until: float | None = None) -> dict:
        """Cancel, hold, release, approve or reject every task of the job array ``workload_id``
        belongs to that the action applies to, at once (``reason``: for hold and reject;
        ``states``, e.g. ``["pending"]``: only the tasks now in one of them; ``until``: a hold's end)."""
        body = {"action": action, **({"reason": reason} if reason else {}),
                **({"states": list(states)} if states else {}), **({"until": until} if until else {})}
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/array-action", body=body)

    def report_checkpoint(self, workload_id: str, at: float | None = None, on_stop: bool = False) -> dict:
        """Running work saved a checkpoint (at ``at``, a UNIX time; default now); ``on_stop``:
        the save was made because the job was told to stop. Preemption then knows what
        stopping the job would lose."""
        body = {k: v for k, v in (("at", at), ("on_stop", on_stop or None)) if v is not None}
        return self.request("POST", f"workloads/{quote(str(workload_id), safe='')}/checkpoint", body=body)

    def queues(self) -> dict:
        return self._get("queues")

    def queue(self, name: str) -> dict:
        return self._get(f"queues/{quote(name, safe='')}")

    def set_queue(self, name: str, **fields) -> dict:
        """Admins: change some fields of a queue (PATCH; a field given replaces the old value)."""
        return self.request("PATCH", f"queues/{quote(name, safe='')}", body=fields)

    def put_queue(self, name: str, **spec) -> dict:
        """Create or replace a queue (admins)."""
        return self.request("PUT", f"queues/{quote(name, safe='')}", body=spec)

    def delete_queue(self, name: str) -> None:
        self.request("DELETE", f"queues/{quote(name, safe='')}")

    def classes(self) -> dict:
        return self._get("classes")

    def put_class(self, name: str, **spec) -> dict:
        return self.request("PUT", f"classes/{quote(name, safe='')}", body=spec)

    def delete_class(self, name: str) -> None:
        self.request("DELETE", f"classes/{quote(name, safe='')}")

    def nodes(self) -> dict:
        return self._get("nodes")

    def drain(self, name: str, draining: bool = True) -> dict:
        """Admins: stop (or with ``draining=False`` resume) placing new work on a node."""
        return self.request("PATCH", f"nodes/{quote(name, safe='')}", body={"draining": draining})

    def usage(self, start: float | None = None, end: float | None = None, by: str | None = None) -> dict:
        """GPU-hours and cost between UNIX times ``start`` and ``end`` (default: the last 7 days)."""
        return self._get("usage", start=start, end=end, by=by)

    def approvals(self) -> dict:
        return self._get("approvals")

    def decide(self, workload_id: str, approve: bool, reason: str = "") -> dict:
        return self.request("POST", f"approvals/{quote(str(workload_id), safe='')}",
                            body={"approve": bool(approve), "reason": reason})

    def audit(self, since=None, until=None, kind=None, workload=None, limit=None) -> dict:
        return self._get("audit", since=since, until=until, kind=kind, workload=workload, limit=limit)


def _root_cause(e: BaseException) -> str:
    """'Connection refused' rather than urllib3's nested wrapper reprs."""
    while True:
        nxt = e.__cause__ or e.__context__ or (e.args[0] if e.args and isinstance(e.args[0], BaseException)
                                               else None)
        if nxt is None or nxt is e:
            break
        e = nxt
        reason = getattr(e, "reason", None)
        if isinstance(reason, BaseException):
            e = reason
    text = str(e)
    if "] " in text and text.startswith("[Errno"):
        text = text.split("] ", 1)[1]
    if ": " in text and "Failed to establish" in text:
        text = text.rsplit(": ", 1)[1]
    return text or type(e).__name__
