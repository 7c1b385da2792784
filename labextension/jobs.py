"""A small Python client for ComputeHub jobs, for notebooks and scripts (stdlib only).

    from labextension import jobs
    job = jobs.submit("train.py", "--lr", "0.1", gpus=2, time_limit="2h")
    job.status()["state"]; job.wait(); print("\\n".join(job.logs()))
    sweep = jobs.submit("sweep.py", gpus=1, array="0-19%4")   # 20 tasks, 4 at a time (job_arrays.py)
    svc = jobs.serve("python -m http.server $PORT", gpus=1); svc.wait_ready(); svc.url

URL and token come from the environment the hub gives a single-user server:
``$COMPUTEHUB_URL`` (else the hub's public URL + ``/services/computehub``) and
``$JUPYTERHUB_API_TOKEN`` (or ``$COMPUTEHUB_TOKEN``). Errors raise ``JobError``
with one line a person can act on.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from .job_text import JobError, array_text, begin_time, parse_duration, script_command  # noqa: F401 - its interface

SERVICE = "services/computehub"
TERMINAL = ("finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")
WAITING = ("pending", "held", "awaiting_approval")
JOB_KINDS = ("training", "batch", "inference")
ENV_PASSED = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect means the URL is not the service (the hub sends unknown paths to its login)."""

    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def default_url(service: str = SERVICE) -> str | None:
    """$COMPUTEHUB_URL, else the service under the hub's public URL ($JUPYTERHUB_PUBLIC_HUB_URL,
    …/hub/, which JupyterHub sets in the servers it spawns), else None."""
    env = os.environ
    if env.get("COMPUTEHUB_URL"):
        return env["COMPUTEHUB_URL"]
    hub = env.get("JUPYTERHUB_PUBLIC_HUB_URL") or ""
    if hub:
        base = hub.rstrip("/")
        return (base[:-4] if base.endswith("/hub") else base) + "/" + service
    return None


def public_service_url(url: str) -> str:
    """The service's URL as a browser reaches it (the hub's public URL when the hub says it)."""
    hub = os.environ.get("JUPYTERHUB_PUBLIC_HUB_URL", "").rstrip("/")
    if hub.startswith(("http://", "https://")):
        return (hub[:-4] if hub.endswith("/hub") else hub) + "/" + SERVICE
    return url


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0):
        url = url or default_url()
        if not url:
            raise JobError("no ComputeHub service configured: $COMPUTEHUB_URL is not set (is ComputeHub "
                           "installed on this hub?)")
        if not url.startswith(("http://", "https://")):
            raise JobError(f"$COMPUTEHUB_URL must start with http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
        self.token = token or os.environ.get("COMPUTEHUB_TOKEN") or os.environ.get("JUPYTERHUB_API_TOKEN")
        if not self.token:
            raise JobError("no API token: $JUPYTERHUB_API_TOKEN is not set (run this in a hub's notebook, "
                           "or set $COMPUTEHUB_TOKEN to a token from <hub>/hub/token)")
        self.timeout = timeout

    def request(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode([(k, v) for k, v in params.items() if v is not None], doseq=True)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"token {self.token}", "Accept": "application/json",
            "Content-Type": "application/json"})
        try:
            with _OPENER.open(req, timeout=self.timeout) as r:
                data = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise self._error(e) from None
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", e)
            raise JobError(f"cannot reach ComputeHub at {self.url}: {why}") from None
        except ValueError:
            raise JobError(f"no ComputeHub service at {self.url} (its answer is not JSON); "
                           "check $COMPUTEHUB_URL") from None
        if not isinstance(data, dict):
            raise JobError(f"no ComputeHub service at {self.url} (unexpected answer); check $COMPUTEHUB_URL")
        return data

    def _error(self, e: urllib.error.HTTPError) -> JobError:
        try:
            d = json.loads(e.read())
            msg = d.get("message") if isinstance(d, dict) else None
        except (ValueError, OSError):
            msg = None
        if msg:
            if e.code == 403 and "lacks" in msg:
                msg += " (ask the hub's admin to add it to the server's token: Spawner.server_token_scopes)"
            return JobError(msg, e.code)
        if 300 <= e.code < 500:          # the service answers its errors in JSON; this is someone else
            return JobError(f"no ComputeHub service at {self.url} (HTTP {e.code}); check $COMPUTEHUB_URL", e.code)
        if e.code in (502, 503, 504):
            return JobError(f"ComputeHub at {self.url} is not running (HTTP {e.code}); try again shortly", e.code)
        return JobError(f"unexpected answer from ComputeHub: HTTP {e.code}", e.code)

    # --- operations ---------------------------------------------------------------------

    def submit_spec(self, spec: dict) -> "Job":
        """The submitted job's handle; for a job array a ``JobArray`` (a list of its tasks' handles)."""
        w = self.request("POST", "workloads", spec)
        if w.get("tasks"):
            from .job_arrays import JobArray      # it builds on Job, below
            return JobArray(self, w)
        return Job(self, w)

    def array_tasks(self, array_id: str) -> list[dict]:
        """Every task of a job array (named by its first task's id), ended ones too, in index order."""
        return self.request("GET", "workloads", params={
            "array": array_id, "state": [*WAITING, "admitted", "running", "preempting", "cancelling", "reclaiming",
                                         *TERMINAL], "limit": 10_000})["workloads"]

    def job(self, workload_id: str) -> "Job":
        return Job(self, self.request("GET", f"workloads/{urllib.parse.quote(workload_id, safe='')}"))

    def jobs(self, include_ended: bool = False, limit: int = 50) -> list[dict]:
        """My jobs (training, batch, inference) in submission order: those waiting or running,
        or with ``include_ended`` my latest ``limit`` of every state."""
        me = self.request("GET", "me")["name"]
        params = {"user": me, "kind": JOB_KINDS, "limit": 10_000}      # the service's largest page
        if include_ended:
            # Newest first from the service, so a long history is never read whole.
            params.update(state=["held", "pending", "awaiting_approval", "admitted", "running", "preempting",
                                 "cancelling", "reclaiming", *TERMINAL],
                          order="newest", limit=limit)
        # Each waiting one with why it waits (and its position, ETA), in the one request.
        items = self.request("GET", "workloads", params={**params, "explain": "true"})["workloads"]
        return items[::-1] if include_ended else items

    def logs(self, workload_id: str, tail: int = 200) -> list[str]:
        """The last ``tail`` lines of a job's output."""
        return (self.log_piece(workload_id, {"tail": tail}) or {}).get("lines", [])

    def log_piece(self, workload_id: str, params: dict) -> dict | None:
        """``GET workloads/{id}/logs`` with ``tail`` or ``after`` (a byte offset an earlier answer
        gave): lines, offset, more; None while the job has no log yet."""
        try:
            return self.request("GET", f"workloads/{urllib.parse.quote(workload_id, safe='')}/logs", params=params)
        except JobError as e:
            if e.status == 404 and "no logs" in str(e):
                return None
            raise

    def cancel(self, workload_id: str) -> dict:
        return self.request("DELETE", f"workloads/{urllib.parse.quote(workload_id, safe='')}")

    def hold(self, workload_id: str, reason: str = "", until=None) -> dict:
        """Keep waiting work from starting until ``release`` (or ``until``: ``begin_time``'s)."""
        body = {k: v for k, v in (("reason", reason), ("until", until and begin_time(until))) if v}
        return self.request("POST", f"workloads/{urllib.parse.quote(workload_id, safe='')}/hold", body)

    def release(self, workload_id: str) -> dict:
        return self.request("POST", f"workloads/{urllib.parse.quote(workload_id, safe='')}/release", {})

    def top(self, workload_id: str) -> dict:
        """First among my own waiting work of its queue and class (Slurm's ``scontrol top``)."""
        return self.request("POST", f"workloads/{urllib.parse.quote(workload_id, safe='')}/top", {})

    def update(self, workload_id: str, changes: dict, whole_array: bool = False, dry_run: bool = False,
               states=None) -> dict:
        """Change waiting work (``PATCH workloads/{id}``: resources, time_limit, queue, name, ...;
        ``states``: with ``whole_array``, only the tasks waiting in one of them)."""
        return self.request("PATCH", f"workloads/{urllib.parse.quote(workload_id, safe='')}", changes,
                            {"tasks": "all" if whole_array else None, "dry_run": "true" if dry_run else None,
                             "state": list(states) if states else None})

    def set_mail(self, workload_id: str, mail) -> dict:
        """What live work mails its owner about from now on (``"end,fail"``; ``[]``: nothing)."""
        return self.request("POST", f"workloads/{urllib.parse.quote(workload_id, safe='')}/mail", {"mail": mail})


def job_spec(command, *, kind: str = "training", script: str | None = None, gpus: int = 1,
             gpu_model: str | None = None, workers: int = 1, cpu=None, memory=None, queue: str | None = None,
             priority: str | None = None, time_limit=None, name: str | None = None, workdir: str | None = None,
             port: int | None = None, checkpoint_every=None, after=None, hold: bool = False, array=None,
             mail=None, begin=None) -> dict:
    """The submission for a job (``POST workloads``), checked here so mistakes get one clear line.
    ``after``: jobs (``Job`` handles or ids, a list or one text with commas) it runs after, each id
    optionally with ``:any`` or ``:failed``; it is held until they have ended as asked. ``hold``: it
    is held until released (``Job.release``). ``array``: a job array, a task per index: Slurm's
    text (``"0-9"``, ``"0-99%10"``: at most 10 at a time), a ``range`` or a list of indexes.
    ``mail``: mail me when it begins, ends, fails or is requeued (``"end,fail"``, ``["all"]``).
    ``begin``: not before then (``begin_time``: a UNIX time, a datetime, or ``"2h"`` from now)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise JobError(f"gpus must be a whole number 0 or more, not {gpus!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise JobError(f"workers must be a whole number 1 or more, not {workers!r}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535):
        raise JobError(f"port must be from 1024 to 65535, not {port!r}")
    resources = {"gpu": gpus}
    if cpu not in (None, ""):
        resources["cpu"] = cpu
    if memory not in (None, ""):
        resources["memory"] = memory
    env = {k: os.environ[k] for k in ENV_PASSED if os.environ.get(k)}
    job = {"command": command, "workdir": os.path.abspath(workdir or os.getcwd()), "env": env}
    if script is not None:
        job["script"] = script
    if port is not None:
        job["port"] = port
    spec = {"kind": kind, "resources": resources, "workers": workers, "metadata": {"job": job}}
    for key, value in (("gpu_model", gpu_model), ("queue", queue), ("priority", priority), ("name", name)):
        if value:
            spec[key] = value
    if time_limit not in (None, ""):
        spec["time_limit"] = parse_duration(time_limit, "time limit")
    if checkpoint_every not in (None, ""):
        spec["checkpoint_every"] = parse_duration(checkpoint_every, "checkpoint interval")
    if after not in (None, "", []):
        spec["after"] = after_ids(after)
    if hold:
        spec["hold"] = True
    if begin not in (None, ""):
        spec["begin"] = begin_time(begin)
    if array is not None:
        spec["array"] = array_text(array)
    if mail not in (None, "", []):
        spec["mail"] = mail        # the service checks it and says what is wrong
    return spec


def after_ids(after) -> list[str]:
    """``after`` as the service takes it: a list of ids (with their conditions); a ``JobArray``
    is every task of it (``w12[]``)."""
    items = after if isinstance(after, (list, tuple)) and not hasattr(after, "after_entry") else [after]
    out = []
    for item in items:
        if hasattr(item, "after_entry"):
            out.append(item.after_entry)
        elif isinstance(item, Job):
            out.append(item.id)
        elif isinstance(item, str):
            out.extend(x.strip() for x in item.split(",") if x.strip())
        else:
            raise JobError(f"after takes jobs or their ids (like w0000042), not {item!r}")
    return out


class Job:
    """A handle on one workload: ``status()``, ``wait()``, ``logs()``, ``cancel()``, ``url``."""

    def __init__(self, client: Client, workload: dict):
        self.client, self.id, self.last = client, workload["id"], workload

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.last.get('state')}>"

    def status(self) -> dict:
        self.last = self.client.request("GET", f"workloads/{urllib.parse.quote(self.id, safe='')}")
        return self.last

    @property
    def state(self) -> str:
        return self.status()["state"]

    @property
    def url(self) -> str:
        """Where an inference service answers (through the hub's proxy, with hub auth)."""
        return f"{public_service_url(self.client.url)}/serve/{self.id}/"

    def logs(self, tail: int = 200) -> list[str]:
        return self.client.logs(self.id, tail)

    def cancel(self) -> dict:
        self.last = self.client.cancel(self.id)
        return self.last

    def hold(self, reason: str = "", until=None) -> dict:
        """Keep it from starting until ``release()`` (or ``until``: a datetime, UNIX time, or "2h")."""
        self.last = self.client.hold(self.id, reason, until)
        return self.last

    def release(self) -> dict:
        self.last = self.client.release(self.id)
        return self.last

    def top(self) -> dict:
        """Put it first among my own waiting jobs of its queue and class."""
        self.last = self.client.top(self.id)
        return self.last

    def update(self, gpus: int | None = None, cpu=None, memory=None, **changes) -> dict:
        """Change it while it waits (running: its name, checkpoint_every, a shorter time_limit):
        ``job.update(gpus=2, memory="32Gi")``, ``job.update(time_limit=1800)`` (docs/cli.md, "update")."""
        extra = {k: v for k, v in (("gpu", gpus), ("cpu", cpu), ("memory", memory)) if v is not None}
        if extra:
            changes["resources"] = {**changes.get("resources", {}), **extra}
        self.last = self.client.update(self.id, changes)
        return self.last

    def mail(self, types="end") -> dict:
        """Mail me about it from now on: ``"end"``, ``"end,fail"``, ``"all"``; ``"none"`` for no mail
        (for a task of a job array, the whole array's)."""
        self.last = self.client.set_mail(self.id, [] if types in ("none", [], None) else types)
        return self.last

    def wait(self, timeout: float | None = None, every: float = 1.0) -> dict:
        """Until it ended; returns its last state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            w = self.status()
            if w["state"] in TERMINAL:
                return w
            if deadline is not None and time.monotonic() > deadline:
                raise JobError(f"{self.id} is still {w['state']} after {timeout:g} s")
            time.sleep(every)

    def wait_ready(self, timeout: float | None = None, every: float = 1.0) -> str:
        """For a service: until the launcher says it answers; returns its URL."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            w = self.status()
            if w["state"] in TERMINAL:
                raise JobError(f"{self.id} ended ({w['state']}): {w.get('reason') or ''}".strip())
            if ((w.get("metadata") or {}).get("status") or {}).get("ready"):
                return self.url
            if deadline is not None and time.monotonic() > deadline:
                raise JobError(f"{self.id} is not ready after {timeout:g} s ({w['state']})")
            time.sleep(every)


def submit(script: str, *args: str, client: Client | None = None, **options) -> Job:
    """Submit ``script`` (a .py file runs with this interpreter) with ``args`` as a training job.
    Options: gpus, gpu_model, workers, cpu, memory, queue, priority, time_limit, checkpoint_every, name,
    workdir, after (jobs it runs after), hold (held until released), array (a job array: returns a
    ``JobArray``, each task with ``$COMPUTEHUB_ARRAY_TASK_ID``), mail (``"end,fail"``: mail me)."""
    return (client or Client()).submit_spec(job_spec(script_command(script, args), **options))


def submit_code(code: str, client: Client | None = None, **options) -> Job:
    """Submit Python source (a cell) as a training job."""
    return (client or Client()).submit_spec(job_spec([sys.executable, "-u", "{script}"], script=code, **options))


def serve(command: str, *, replicas: int = 1, client: Client | None = None, **options) -> Job:
    """Start an inference service: ``command`` is a shell line that listens on ``$PORT``
    (or on ``port=`` if given). Its URL (``job.url``) goes through the hub's proxy."""
    if not command.strip():
        raise JobError("serve needs a command, e.g. 'python -m http.server $PORT'")
    try:
        shlex.split(command)    # unbalanced quotes are the caller's mistake, said now
    except ValueError as e:
        raise JobError(f"the command does not parse as a shell line: {e}") from None
    return (client or Client()).submit_spec(job_spec(command, kind="inference", workers=replicas, **options))


def jobs(include_ended: bool = False, client: Client | None = None, limit: int = 50) -> list[dict]:
    return (client or Client()).jobs(include_ended, limit)


def logs(workload_id: str, tail: int = 200, client: Client | None = None) -> list[str]:
    return (client or Client()).logs(workload_id, tail)


def cancel(workload_id: str, client: Client | None = None) -> dict:
    return (client or Client()).cancel(workload_id)
