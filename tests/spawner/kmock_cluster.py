"""A Kubernetes API for tests: kmock as a real HTTP server, plus a test kubelet.

No real API server can run on the test machines (no kube-apiserver, kind or k3s), so the
Kubernetes API is emulated by kmock (a real aiohttp server that stores objects
and streams watches). KubeSpawner and kubernetes_asyncio talk to it over HTTP
through an ordinary kubeconfig. This module fills kmock's known gaps:

- the client sends ``watch=True``, kmock recognises only ``watch=true``;
- created objects get ``metadata.uid/resourceVersion/creationTimestamp`` (and namespaced ones
  their ``namespace``)
  (and pods a ``Pending`` status), updates a new ``resourceVersion``;
- ``labelSelector`` is honoured on lists and watches;
- every manifest a client creates is recorded as sent (``created()``), for
  kubernetes-validate;
- every request is recorded (``requests()``), to check RBAC rules against;
- ``pods/log`` serves the lines a test wrote for the pod (``write_pod_log``), stamped when written,
  as the kubelet serves them (``timestamps``, ``sinceSeconds``, ``tailLines``); 404 for a pod with
  none (nothing runs in containers here), not the pod's JSON.

The test plays the kubelet: ``ProcessKubelet`` runs each new pod's command as a
local process on its own loopback address (127.0.0.N, the pod IP) with the
pod's environment, and reports it ``Running``; a deleted pod's process is
killed, an exited one is reported terminated. ``faults`` maps an image to the status the
kubelet writes instead of running a pod of it (e.g. a waiting ErrImagePull: an image it
cannot pull), or to None (it never takes the pod: its node is gone). ``KmockCluster`` runs all this on
its own thread and event loop; stop it after the clients (hub) that use it.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import kmock

_rv = itertools.count(1000)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc3339(t: float) -> str:
    """As the kubelet stamps log lines: RFC 3339 with the fraction's trailing zeros trimmed."""
    s = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return s.rstrip("0").rstrip(".") + "Z"


def selector_matches(selector: str | None, labels: dict | None) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, comma-joined."""
    labels = labels or {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with the gaps above filled."""

    async def __call__(self, raw_request):
        self.__dict__.setdefault("requests", []).append(
            (raw_request.method, raw_request.path, dict(raw_request.query), raw_request.headers.get("User-Agent", "")))
        if raw_request.query.get("watch") in ("True", "1"):
            query = {k: v for k, v in raw_request.query.items()}
            query["watch"] = "true"
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.with_query(query))
        return await super().__call__(raw_request)

    async def _handle(self, request):
        data = request.data if isinstance(request.data, dict) else None
        if request.resource is not None and data is not None:
            if request.action == kmock.action.CREATE:
                self.__dict__.setdefault("created_manifests", []).append(
                    (request.resource.plural, copy.deepcopy(data)))
                meta = data.setdefault("metadata", {})
                if request.namespace:           # cluster-scoped objects (nodes) have none
                    meta.setdefault("namespace", request.namespace)
                meta.update(uid=str(uuid.uuid4()), resourceVersion=str(next(_rv)), creationTimestamp=_now())
                if request.resource.plural == "pods":
                    data.setdefault("status", {"phase": "Pending"})
            elif request.action == kmock.action.UPDATE:
                data.setdefault("metadata", {})["resourceVersion"] = str(next(_rv))
        return await super()._handle(request)

    async def _serve_fetch(self, request):
        if request.subresource == "log":
            return self._pod_log(request)
        return await super()._serve_fetch(request)

    def _pod_log(self, request) -> bytes:
        lines = self.__dict__.setdefault("pod_logs", {}).get((request.namespace, request.name))
        if lines is None:                      # no containers run here: no logs (not the pod's JSON)
            raise kmock.KubernetesNotFoundError(message="the emulated API keeps no container logs")
        q = request.params
        if "sinceSeconds" in q:
            cutoff = time.time() - int(q["sinceSeconds"])
            lines = [(t, line) for t, line in lines if t >= cutoff]
        if "tailLines" in q:
            lines = lines[-int(q["tailLines"]):] if int(q["tailLines"]) else []
        stamped = q.get("timestamps") in ("true", "True", "1")
        return "".join((f"{_rfc3339(t)} " if stamped else "") + line + "\n" for t, line in lines).encode()

    async def _serve_list(self, request):
        result = await super()._serve_list(request)
        sel = request.params.get("labelSelector")
        result["items"] = [i for i in result["items"] if selector_matches(sel, i.get("metadata", {}).get("labels"))]
        result["metadata"] = {"resourceVersion": str(next(_rv))}
        return result

    async def _serve_watch(self, request):
        sel = request.params.get("labelSelector")
        async for event in super()._serve_watch(request):
            if isinstance(event, dict):
                labels = (event.get("object") or {}).get("metadata", {}).get("labels")
                if not selector_matches(sel, labels):
                    continue
            yield event


class ProcessKubelet:
    """Runs each pod's first container as a local process on a loopback pod IP (see module doc)."""

    def __init__(self, cluster: "KmockCluster", workdir: Path, env_overrides=None):
        self.cluster, self.workdir = cluster, workdir
        self.env_overrides = env_overrides or (lambda pod, env, ip: env)
        self.procs: dict[tuple[str, str], tuple[str, subprocess.Popen]] = {}
        self.faults: dict[str, dict | None] = {}      # image -> the status written instead of running it
        self._ips = itertools.count(10)

    def _command(self, container: dict) -> list[str]:
        return list(container.get("command") or []) + list(container.get("args") or [])

    async def tick(self):
        live = {}
        for (res, ns, name), obj in list(self.cluster.emulator.objects.items()):
            if res.plural == "pods" and not obj.deleted:
                live[(ns, name)] = obj.raw
        for key in list(self.procs):
            uid, proc = self.procs[key]
            pod = live.get(key)
            if pod is None or pod["metadata"].get("uid") != uid:        # deleted (or replaced)
                _kill(proc)
                del self.procs[key]
            elif proc.poll() is not None and pod["status"].get("phase") == "Running":
                code = proc.returncode
                await self.cluster.patch_pod_status(*key, {
                    "phase": "Succeeded" if code == 0 else "Failed",
                    "containerStatuses": [{"name": "notebook", "ready": False, "restartCount": 0, "image": "",
                                           "imageID": "", "state": {"terminated": {"exitCode": code}}}]})
        for key, pod in live.items():
            if key in self.procs or pod.get("status", {}).get("phase") != "Pending":
                continue
            if pod["metadata"].get("labels", {}).get("component") != "singleuser-server":
                continue
            image = pod["spec"]["containers"][0].get("image", "")
            if image in self.faults:
                if self.faults[image] is not None and not pod.get("status", {}).get("containerStatuses"):
                    await self.cluster.patch_pod_status(*key, self.faults[image])
                continue
            ip = f"127.0.0.{next(self._ips)}"
            container = pod["spec"]["containers"][0]
            env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
            home = self.workdir / "pods" / key[1]
            home.mkdir(parents=True, exist_ok=True)
            env = {"PATH": os.environ["PATH"], "HOME": str(home), **env}
            env = self.env_overrides(pod, env, ip)
            log = open(home / "pod.log", "ab")
            proc = subprocess.Popen(self._command(container), env=env, cwd=home, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.procs[key] = (pod["metadata"]["uid"], proc)
            await self.cluster.patch_pod_status(*key, {
                "phase": "Running", "podIP": ip, "hostIP": "127.0.0.1", "startTime": _now(),
                "containerStatuses": [{"name": container["name"], "ready": True, "restartCount": 0,
                                       "image": container.get("image", ""), "imageID": "",
                                       "state": {"running": {"startedAt": _now()}}}]})

    def stop(self):
        for _, proc in self.procs.values():
            _kill(proc)
        self.procs.clear()


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)


class KmockCluster:
    """kmock on its own thread; ``url``, ``kubeconfig``, thread-safe ``call`` and ``run``."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.url = ""
        self.kubelet: ProcessKubelet | None = None
        self.controllers: list = []          # async callables run every tick (test kubelets/controllers)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ---- life cycle -----------------------------------------------------------------
    def start(self) -> "KmockCluster":
        self._thread = threading.Thread(target=self._main, name="kmock", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error:
            raise RuntimeError(f"kmock did not start: {self._error!r}")
        return self

    def _main(self):
        try:
            asyncio.run(self._serve())
        except BaseException as e:   # noqa: BLE001 - reported by start()/stop()
            self._error = e
            self._ready.set()

    async def _serve(self):
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Emulator() as em, kmock.Server(em) as server:
            em.resources.load_bundled()
            self.emulator = em
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            while not self._stop.is_set():
                for fn in ([self.kubelet.tick] if self.kubelet else []) + list(self.controllers):
                    try:
                        await fn()
                    except Exception as e:  # noqa: BLE001 - a test controller's bug must show, not hang
                        self._error = e
                try:
                    await asyncio.wait_for(self._stop.wait(), 0.1)
                except asyncio.TimeoutError:
                    pass
            if self.kubelet:
                self.kubelet.stop()

    def stop(self):
        if self._thread and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)
        if self.kubelet:
            self.kubelet.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def check(self):
        """Raise what went wrong inside the emulator or a test controller (the 5xx it answered;
        404 and 409 are ordinary answers of the API)."""
        if self._error:
            raise AssertionError(f"kmock thread failed: {self._error!r}")
        errors = self.call(lambda: [e for e in self.emulator.errors
                                    if not (isinstance(e, kmock.KubernetesError) and e.status in (404, 409))])
        if errors:
            raise AssertionError(f"kmock answered errors: {errors!r}")

    # ---- access from the test thread ------------------------------------------------
    def call(self, fn, *args, timeout: float = 30):
        """Run ``fn(*args)`` on the emulator's loop and return its result."""
        async def wrap():
            return fn(*args)
        return self.run(wrap(), timeout)

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
            f"clusters:\n- name: kmock\n  cluster:\n    server: {self.url}\n"
            f"contexts:\n- name: kmock\n  context:\n    cluster: kmock\n    user: kmock\n    namespace: {namespace}\n"
            "users:\n- name: kmock\n  user:\n    token: not-checked\n")
        return path

    def objects(self, plural: str, namespace: str | None = None) -> list[dict]:
        """Copies of the live objects of a resource (e.g. 'pods'), optionally in one namespace."""
        def read():
            return [copy.deepcopy(obj.raw) for (res, ns, _), obj in list(self.emulator.objects.items())
                    if res.plural == plural and not obj.deleted and (namespace is None or ns == namespace)]
        return self.call(read)

    def requests(self) -> list[tuple[str, str, dict, str]]:
        """Every HTTP request the emulator got: (method, path, query, User-Agent)."""
        return self.call(lambda: list(self.emulator.__dict__.get("requests", [])))

    def created(self, plural: str | None = None) -> list[dict]:
        """Every manifest clients created, as sent (before the emulator added metadata)."""
        return self.call(lambda: [copy.deepcopy(m) for p, m in self.emulator.__dict__.get("created_manifests", [])
                                  if plural is None or p == plural])

    def write_pod_log(self, namespace: str, name: str, lines: list[str], at: float | None = None) -> None:
        """What the pod's container wrote, as ``pods/log`` will serve it: each line stamped now, or
        all at ``at`` (lines written within one instant)."""
        def write():
            logs = self.emulator.__dict__.setdefault("pod_logs", {})
            logs.setdefault((namespace, name), []).extend((time.time() if at is None else at, line)
                                                          for line in lines)
        self.call(write)

    async def patch_pod_status(self, namespace: str, name: str, status: dict) -> None:
        async with self.emulator.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                                       json={"status": status},
                                       headers={"Content-Type": "application/merge-patch+json"}) as r:
            r.raise_for_status()
