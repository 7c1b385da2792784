"""QueuedKubeSpawner: KubeSpawner whose pods wait in ComputeHub's queue (docs/spawner.md).

The queueing itself is ``QueueingMixin`` (spawner/queueing.py). This class adds
what is Kubernetes-specific:

- what a spawn asks for comes from what admins already configure for
  KubeSpawner: the chosen profile's ``extra_resource_limits`` (``nvidia.com/gpu``),
  its GPU-model node selector (``nvidia.com/gpu.product``), ``cpu_limit`` and
  ``mem_limit``;
- profile overrides never leak from one spawn into the next (KubeSpawner applies
  them by setattr on a spawner object the hub keeps, merging dicts);
- the user's options are checked against what the admin offers
  (spawner/options.py), and the final pod manifest is guarded;
- the pod, created only after admission, carries its placement: the node,
  the GPU count, the class's PriorityClass and labels naming the workload.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
import time

from kubespawner import KubeSpawner
from jupyterhub.utils import maybe_future
from tornado import web
from traitlets import Dict, Enum, Float, List, Unicode, default, validate

from scheduler.config_checks import check_number

from .inventory import model_key
from .kube_failures import disrupted, inventory_state, node_gone, node_state, pod_trouble
from .kube_hardening import harden_notebook_pod
from .options import OptionsError, PodPolicyError, WAIVABLE, admin_allowed, check_pod, validate_user_options
from .pod_guard import restricted_violations
from .queueing import QueueingMixin, ServerFailed
from .service_client import ServiceClient, ServiceError

LABEL_PREFIX = "computehub/"
USER_ANNOTATION = LABEL_PREFIX + "user"     # the hub's user name as is (labels are escaped)
LABEL_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")    # a label value (fullmatch)
HASH_CHARS = 10
# Traits the queueing layer derives per spawn; restored with the profile overrides.
DERIVED = ("gpus", "gpu_model", "computehub_queue")


def label_value(text: str) -> str:
    """A Kubernetes label value naming ``text``, distinct for distinct texts (users must never share one:
    the launcher finds a user's notebook pod by it). ``text`` itself when it is a valid value without
    "--"; else a readable prefix, "--" and 10 hex digits of its sha256. A text with "--" is hashed
    too, so no name can pose as another's hashed value."""
    text = str(text)
    if len(text) <= 63 and "--" not in text and LABEL_RE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    prefix = re.sub(r"[^A-Za-z0-9._]+", "-", text)          # "-" runs collapse: never "--" inside
    prefix = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", prefix[:63 - 2 - HASH_CHARS]) or "x"
    return f"{prefix}--{digest}"


class QueuedKubeSpawner(QueueingMixin, KubeSpawner):
    """A KubeSpawner whose start waits for ComputeHub to admit a ``notebook`` workload."""

    gpu_resource = Unicode("nvidia.com/gpu", config=True,
                           help="Extended resource name of a GPU in pod limits (the device plugin's).")
    gpu_model_labels = List(Unicode(), ["nvidia.com/gpu.product"], config=True,
                            help="""Node labels whose value in a profile's node_selector names the GPU model
        (e.g. nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB → flavor 'a100').""")
    gpu_model_map = Dict(Unicode(), config=True,
                         help="""Explicit GPU-model label value → ComputeHub flavor, e.g.
        {"NVIDIA-A100-SXM4-80GB": "a100"}. Unlisted values are shortened automatically ('a100', 'h100').""")
    scheduler_node_selector_keys = List(Unicode(), config=True,
                                        help="""Node selector keys of a profile that ComputeHub's placement
        must respect too (sent as the workload's node_selector; the service must know these node labels).""")
    placement_mode = Enum(["nodeName", "affinity"], "nodeName", config=True,
                          help="""How the admitted placement reaches the pod. 'nodeName' binds the pod to the
        node ComputeHub chose, bypassing the kube-scheduler (it would otherwise re-decide, and its own
        priority preemption would fight ComputeHub's); the kubelet still checks resources, node selectors
        and NoExecute taints. 'affinity' adds a required node affinity on kubernetes.io/hostname and lets
        the kube-scheduler bind it (taints with NoSchedule then need tolerations).""")
    priority_class_names = Dict(Unicode(), config=True,
                                help="""ComputeHub priority class → Kubernetes PriorityClass name of the pod.
        Classes not listed use priority_class_template.""")
    priority_class_template = Unicode("computehub-{priority}", config=True,
                                      help="""PriorityClass name for classes not in priority_class_names
        ('{priority}' is the class); '' leaves priorityClassName to KubeSpawner's priority_class_name.""")
    pod_computehub_url = Unicode("", config=True,
                                 help="""COMPUTEHUB_URL as seen from inside a pod (e.g.
        http://computehub:10101/services/computehub); '' = computehub_url.""")
    pod_policy_waive = List(Enum(sorted(WAIVABLE)), config=True,
                            help=f"""Pod guard checks an admin switches off, from: {', '.join(sorted(WAIVABLE))}.
        Empty (default): no pod may do what Kubernetes' Pod Security Standards "baseline" level forbids
        (privileged, host namespaces, host paths and ports, added capabilities, unconfined seccomp or
        AppArmor, SELinux labels, unmasked /proc, unsafe sysctls) or allow privilege escalation. The
        containers an admin writes into init_containers or extra_containers are not checked.""")

    pod_security = Enum(["baseline", "restricted"], "baseline", config=True,
                        help="""The Pod Security Standards level notebook pods meet (pod_policy_waive
        relaxes baseline). restricted, for a namespace enforcing it: the runtime's default seccomp profile,
        ALL capabilities dropped, no privilege escalation, not root, filled in where the configuration
        leaves them unsaid; a pod that still falls short (a root or privileged container, an added
        capability, a hostPath) is refused with the reason, admin containers included.""")

    container_start_grace = Float(60.0, config=True, help="""Seconds the admitted notebook pod's container
        may keep failing to start because its image cannot be pulled (ErrImagePull, ImagePullBackOff) or a
        Secret or ConfigMap it needs is missing (CreateContainerConfigError) before the spawn fails with that
        reason and the GPUs return (seconds, from the pod's creation; InvalidImageName fails at once).""")
    unscheduled_grace = Float(300.0, config=True, help="""Seconds the admitted notebook pod may stay
        unscheduled, or not taken by the node it is bound to (gone, NotReady), before the admission is given
        back with the reason (reported node_lost: requeued if the class requeues, and the spawn waits in the
        queue again; else the spawn fails) (seconds, from the pod's creation).""")

    @validate("container_start_grace", "unscheduled_grace")
    def _grace_ok(self, proposal):
        return check_number(f"{type(self).__name__}.{proposal.trait.name}", proposal.value, low=0, unit="seconds")

    _baseline: dict | None = None          # the admin's values of every trait a profile may override
    _resolved_profiles: list | None = None

    @default("apply_user_options")
    def _default_apply_user_options(self):
        # JupyterHub runs this before start(); an HTTPError passes through as a 400 whose message
        # the spawn form and the REST API show. (Also checked again in load_user_options.)
        return _check_options_hook

    # ---- the user's options ---------------------------------------------------------
    async def _profiles(self) -> list[dict]:
        profile_list = self._sorted_dict_values(self.profile_list)
        if callable(profile_list):
            profile_list = await maybe_future(profile_list(self))
        self._resolved_profiles = self._get_initialized_profile_list(profile_list)
        return self._resolved_profiles

    async def _queues_open_to_user(self) -> list[str]:
        groups = {g.name for g in getattr(self.user, "groups", [])}
        try:
            queues = (await self.client().request("GET", "queues")).get("queues", [])
        except (ServiceError, RuntimeError) as e:
            self.log.warning("ComputeHub: could not list queues: %s", e)
            return []
        return sorted(q["name"] for q in queues if q.get("leaf") and set(q.get("groups") or ()) & groups)

    async def check_user_options(self, options: dict) -> None:
        """Raise OptionsError unless every option is one the admin offers to this user."""
        queues = []
        if (options or {}).get("queue") not in (None, ""):
            queues = await self._queues_open_to_user()
        validate_user_options(options, await self._profiles(), open_queues=queues)

    async def load_user_options(self):
        """Apply the chosen profile onto the configured values — never onto the previous spawn's:
        every trait a profile may override is put back first (KubeSpawner merges dict overrides
        into the current value, so a GPU profile's limit would otherwise stay for a CPU profile)."""
        profiles = await self._profiles()
        keys = set(DERIVED)
        for p in profiles:
            keys |= set(p.get("kubespawner_override") or {})
            for opt in (p.get("profile_options") or {}).values():
                for choice in (opt.get("choices") or {}).values():
                    keys |= set(choice.get("kubespawner_override") or {})
                keys |= set((opt.get("unlisted_choice") or {}).get("kubespawner_override") or {})
        if self._baseline is None:
            self._baseline = {}
        for k in sorted(keys):
            if not self.has_trait(k):
                continue
            if k not in self._baseline:
                self._baseline[k] = copy.deepcopy(getattr(self, k))
            setattr(self, k, copy.deepcopy(self._baseline[k]))
        try:
            await self.check_user_options(self.user_options or {})
        except OptionsError as e:
            raise _http400(e) from None
        await super().load_user_options()
        self._derive_request()

    def _derive_request(self) -> None:
        """GPUs, GPU model and queue of this spawn from the applied profile and options."""
        limit = (self.extra_resource_limits or {}).get(self.gpu_resource)
        if limit not in (None, ""):
            self.gpus = int(str(limit))
        for key in self.gpu_model_labels:
            value = (self.node_selector or {}).get(key)
            if value and self.gpus:
                self.gpu_model = self.gpu_model_map.get(value) or model_key(value)
        queue = (self.user_options or {}).get("queue")
        if queue:
            self.computehub_queue = queue

    async def _submit_or_resume(self, client: ServiceClient) -> dict:
        await self.load_user_options()     # the workload asks for what the chosen profile gives
        return await super()._submit_or_resume(client)

    def workload_spec(self) -> dict:
        spec = super().workload_spec()
        selector = {k: v for k, v in (self.node_selector or {}).items()
                    if k in self.scheduler_node_selector_keys and v is not None}
        if selector:
            spec["node_selector"] = selector
        spec["metadata"]["profile"] = (self.user_options or {}).get("profile") or ""
        return spec

    # ---- how the pod fares: failures named (spawner/kube_failures.py) ------------------
    def _pod_now(self) -> dict | None:
        reflector = getattr(self, "pod_reflector", None)
        return reflector.pods.get(f"{self.namespace}/{self.pod_name}") if reflector is not None else None

    async def _start_server(self):
        """KubeSpawner's start, watched: a pod that cannot start (its image, a missing Secret, evicted,
        never scheduled) fails the spawn at once with the reason (``ServerFailed``) instead of after
        start_timeout, and its pod is deleted."""
        before = (self._pod_now() or {}).get("metadata", {}).get("uid")      # an earlier server's, going
        self._last_pod = None
        start = asyncio.ensure_future(super()._start_server())
        try:
            while not start.done():
                pod = self._pod_now()
                meta = (pod or {}).get("metadata") or {}
                if pod and meta.get("uid") != before and not meta.get("deletionTimestamp"):
                    self._last_pod = pod
                    trouble = pod_trouble(pod, "the notebook server", time.time(),
                                          pull_grace=self.container_start_grace, pending_grace=self.unscheduled_grace)
                    if trouble:
                        start.cancel()
                        await KubeSpawner.stop(self, now=True)
                        raise ServerFailed(trouble.reason, trouble.cluster, trouble.exit_code)
                await asyncio.wait([start], timeout=0.5)
            return start.result()
        finally:
            if not start.done():
                start.cancel()

    _last_pod: dict | None = None       # the server's pod as the last poll saw it (its node, conditions)
    _gone: tuple[str, bool] | None = None   # why its pod vanished, judged by this poll

    async def poll(self):
        """A pod that vanished is judged before the queueing layer reports the end (``ended_why``):
        by what the last poll saw of it (a DisruptionTarget) and by its node as the API has it
        now, since a node that goes takes its pods with it (docs/kubernetes.md)."""
        self._gone = None
        pod = self._pod_now()
        if pod is not None:
            self._last_pod = pod
        elif self.workload_id and self._launched and not self._stopping and self._pods_loaded():
            self._gone = await self._why_gone()
        return await super().poll()

    def _pods_loaded(self) -> bool:
        reflector = getattr(self, "pod_reflector", None)
        return reflector is not None and reflector.first_load_future.done()

    async def _why_gone(self) -> tuple[str, bool] | None:
        who, last = "the notebook server", self._last_pod or {}
        trouble = disrupted(last, who) if last else None
        if trouble and trouble.cluster:
            return f"{trouble.reason}; its pod {self.pod_name} is gone", True
        placement = (self._admitted_w or {}).get("placement") or [{}]
        node = (last.get("spec") or {}).get("nodeName") or placement[0].get("node")
        if not node:
            return None
        trouble = node_gone(self.pod_name, who, node, await self._node_state(node))
        return (trouble.reason, True) if trouble else None

    async def _node_state(self, node: str) -> str | None:
        """``node_state`` of the node as the Kubernetes API has it; where the hub may not read nodes
        (z2jh gives it no ClusterRole), as ComputeHub's inventory has it (the chart's inventory
        removes a deleted node, marks a NotReady one unhealthy, a cordoned one draining)."""
        from kubernetes_asyncio.client.exceptions import ApiException
        try:
            return node_state(self._serialize(await self.api.read_node(node)))
        except ApiException as e:
            if e.status == 404:
                return "deleted"
            self.log.debug("ComputeHub: cannot read node %s (%s); asking the service", node, e.status)
        try:
            n = await self.client().request("GET", f"nodes/{node}")
        except (ServiceError, RuntimeError) as e:
            if getattr(e, "status", 0) == 404:
                return inventory_state(None)
            self.log.info("ComputeHub: could not learn the state of node %s: %s", node, e)
            return None
        return inventory_state(n)

    def ended_why(self) -> tuple[str, bool] | None:
        pod = self._pod_now()
        if pod is None:
            return self._gone or (f"the notebook server's pod {self.pod_name} is gone (deleted outside ComputeHub, "
                                  "or with its node)", False)
        inf = float("inf")
        trouble = pod_trouble(pod, "the notebook server", time.time(), pull_grace=inf, pending_grace=inf)
        return (trouble.reason, trouble.cluster) if trouble else None

    # ---- the pod --------------------------------------------------------------------
    def get_env(self):
        env = super().get_env()
        # On Kubernetes the device plugin exposes the GPUs; host indices would be wrong inside.
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if self.pod_computehub_url:
            env["COMPUTEHUB_URL"] = self.pod_computehub_url
        return env

    def priority_class_for(self, priority: str) -> str:
        if priority in self.priority_class_names:
            return self.priority_class_names[priority]
        return self.priority_class_template.format(priority=priority) if self.priority_class_template else ""

    async def get_pod_manifest(self):
        """KubeSpawner's pod, then the admitted placement, GPU limit, PriorityClass and labels;
        refused (PodPolicyError, shown to the user) if it does what no admin configured."""
        pod = await super().get_pod_manifest()
        w = self._admitted_w or {}
        placement = w.get("placement") or []
        gpus = sum(len(a.get("gpus") or []) for a in placement)
        for c in pod.spec.containers[:1]:           # the notebook container
            for field in ("limits", "requests"):
                res = dict(getattr(c.resources, field) or {})
                res.pop(self.gpu_resource, None)
                if gpus and (field == "limits" or res):
                    res[self.gpu_resource] = str(gpus)
                setattr(c.resources, field, res or None)
        node = placement[0]["node"] if placement else None
        if node and self.placement_mode == "nodeName":
            pod.spec.node_name = node
        elif node:
            pod.spec.affinity = _require_host(self._serialize(pod.spec.affinity) or {}, node)
        pclass = self.priority_class_for(w.get("priority") or "")
        if w.get("priority") and pclass:
            pod.spec.priority_class_name = pclass
        labels = dict(pod.metadata.labels or {})
        labels.update({LABEL_PREFIX + "workload": self.workload_id, LABEL_PREFIX + "user": label_value(self.user.name),
                       LABEL_PREFIX + "queue": label_value(w.get("queue") or "")})
        pod.metadata.labels = {k: v for k, v in labels.items() if v != ""}
        # the exact name, which the launcher checks before copying this pod into the user's jobs
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), USER_ANNOTATION: self.user.name}
        if self.pod_security == "restricted":
            harden_notebook_pod(pod, self._serialize)
        self.check_pod(self._serialize(pod))
        return pod

    def _serialize(self, obj):
        return self.api.api_client.sanitize_for_serialization(obj)

    def check_pod(self, pod: dict) -> None:
        base = {"node_selector": self._baseline_value("node_selector"),
                "tolerations": self._baseline_value("tolerations"),
                "service_account": self._baseline_value("service_account"),
                "init_containers": self._baseline_value("init_containers"),
                "extra_containers": self._baseline_value("extra_containers")}
        try:
            check_pod(pod, admin_allowed(base, self._resolved_profiles or []), waive=self.pod_policy_waive)
            refused = restricted_violations(pod) if self.pod_security == "restricted" else []
            if refused:
                raise PodPolicyError(f"refused: {refused[0]}, which the Pod Security Standards' restricted "
                                     "level forbids (QueuedKubeSpawner.pod_security)")
        except OptionsError as e:
            raise _http400(e) from None

    def _baseline_value(self, name):
        """The admin's configured value of a trait (before any profile override)."""
        return (self._baseline or {}).get(name, getattr(self, name))


def _require_host(affinity: dict, node: str) -> dict:
    """Add 'kubernetes.io/hostname In [node]' to every required node selector term (terms are ORed)."""
    expr = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    na = affinity.setdefault("nodeAffinity", {})
    req = na.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = req.get("nodeSelectorTerms") or [{}]
    for t in terms:
        t["matchExpressions"] = [*(t.get("matchExpressions") or []), expr]
    req["nodeSelectorTerms"] = terms
    return affinity


def _http400(e: OptionsError) -> web.HTTPError:
    err = web.HTTPError(400, "%s", str(e))
    err.jupyterhub_message = str(e)      # what the spawn form and spawn-pending page show
    return err


async def _check_options_hook(spawner: QueuedKubeSpawner, options: dict) -> None:
    try:
        await spawner.check_user_options(options)
    except OptionsError as e:
        raise _http400(e) from None
