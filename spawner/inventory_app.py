"""``computehub-inventory``: keeps the Kubernetes cluster's nodes registered in ComputeHub.

Like jupyterhub-idle-culler (and ``computehub-launcher``) it talks to the service only
through the REST API, with a token holding ``custom:computehub:nodes``. Every
``interval`` seconds it lists the cluster's Nodes (``KubeInventory``), turns them into
node specs (spawner/inventory_kube.py), and puts the new and changed ones and deletes
the nodes it registered that left the cluster. Nodes registered by hand (without
``computehub/source: kubernetes``) are never touched. See docs/inventory.md.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from traitlets import Bool, Float, List, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from .inventory_kube import DRAINING_TAINTS, NodeSkipped, diff, node_spec, what_changed
from .inventory_pods import foreign_use, less_foreign
from scheduler.config_checks import (ConfigError, check_existing_file, check_number, check_resource_name, launch,
                                      recheck)
from .kube_client import api_client
from .service_app import ServiceClientApp
from .service_client import ServiceError

NODES_SCOPE = "custom:computehub:nodes"
K8S_TIMEOUT = 30    # seconds one list of the cluster's nodes or pods may take
WATCH_SETTLE = 0.5  # seconds after a Node event before syncing: a burst of events makes one sync


class Fatal(Exception):
    """Retrying cannot help (a token the service refuses): the app stops with this message."""


class KubeError(Exception):
    """The Kubernetes API could not be asked (or answered an error)."""


class KubeInventory(LoggingConfigurable):
    """Which Kubernetes Nodes count, and how their GPUs are read. ``InventoryApp`` is one, so
    these settings are ``c.InventoryApp.<name>`` (what the chart writes) or ``c.KubeInventory.<name>``."""

    kubeconfig = Unicode("", config=True, help="""Kubeconfig file to use ('' = the in-cluster configuration
        of the pod's service account, falling back to $KUBECONFIG / ~/.kube/config).""")
    label_selector = Unicode("", config=True, help="""Label selector of the Nodes that are ComputeHub nodes,
        e.g. 'nvidia.com/gpu.present=true' ('' = every node). A node that stops matching is removed.""")
    gpu_resource = Unicode("nvidia.com/gpu", config=True,
                           help="Extended resource whose allocatable count is a node's number of GPUs.")
    model_label = Unicode("nvidia.com/gpu.product", config=True, help="""Node label naming the GPU product
        (set by NVIDIA GPU feature discovery, e.g. 'NVIDIA-A100-SXM4-80GB' → model 'a100').""")
    memory_label = Unicode("nvidia.com/gpu.memory", config=True,
                           help="Node label with the memory of one GPU, in MiB (GPU feature discovery).")
    default_model = Unicode(None, allow_none=True, config=True, help="""GPU model (lower case, e.g. 'a100')
        of a node with GPUs but no model label (None = no model).""")
    count_other_pods = Bool(True, config=True, help="""Take what running pods ComputeHub did not place request
        (DaemonSets, the hub and proxy, system pods, GPU work outside ComputeHub) off each node's CPU, memory
        and GPUs, so that the kubelet never refuses a pod ComputeHub placed (needs list on pods, cluster-wide).""")
    watch_nodes = Bool(True, config=True, help="""Also watch the Nodes between syncs, so that a cordon, a node
        going NotReady or a new node reaches ComputeHub within a second, not at the next sync: ComputeHub
        binds pods to nodes itself, and a cordon alone does not stop that (bool).""")
    draining_taints = List(Unicode(), list(DRAINING_TAINTS), config=True, help="""Taint keys that make a node
        draining (no new work) when their effect is NoSchedule or NoExecute; a cordoned node
        (spec.unschedulable) always is.""")

    _client = None

    @validate("kubeconfig")
    def _kubeconfig_ok(self, proposal):
        return check_existing_file(f"{type(self).__name__}.kubeconfig", proposal.value)

    @validate("gpu_resource")
    def _resource_ok(self, proposal):
        return check_resource_name(f"{type(self).__name__}.gpu_resource", proposal.value)

    @validate("default_model")
    def _model_ok(self, proposal):
        from scheduler.validation import MODEL
        if proposal.value is not None and not MODEL.match(proposal.value):
            raise ConfigError(f"{type(self).__name__}.default_model must be a GPU model in lower case like "
                              f"'a100' (or None), not {proposal.value!r}")
        return proposal.value

    async def kube_core(self):
        if self._client is None:
            self._client = await api_client(self.kubeconfig)
        from kubernetes_asyncio.client import CoreV1Api
        return CoreV1Api(self._client)

    async def _kube_list(self, what: str, **kw) -> list[dict]:
        try:
            core = await self.kube_core()
            # resource_version "0": served from the API server's watch cache, not from etcd; a
            # few seconds' staleness is nothing to a sync every interval.
            result = await getattr(core, what)(_request_timeout=K8S_TIMEOUT, resource_version="0", **kw)
        except Exception as e:      # ApiException, a timeout, an unreachable or unconfigured API
            text = str(e).strip()
            raise KubeError(text.splitlines()[0] if text else type(e).__name__) from e
        return [self._client.sanitize_for_serialization(n) for n in result.items]

    async def kube_nodes(self) -> list[dict]:
        """The selected Nodes as the API's JSON."""
        return await self._kube_list("list_node", label_selector=self.label_selector)

    async def kube_foreign_use(self) -> dict[str, tuple[int, int, int]]:
        """Per node, what the running pods ComputeHub did not place request (none when not counted)."""
        if not self.count_other_pods:
            return {}
        pods = await self._kube_list("list_pod_for_all_namespaces",   # bound to a node, not ended
                                     field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
        return foreign_use(pods, self.gpu_resource)

    def kube_spec(self, node: dict, foreign: dict[str, tuple[int, int, int]]) -> dict:
        spec = node_spec(node, gpu_resource=self.gpu_resource, model_label=self.model_label,
                         memory_label=self.memory_label, default_model=self.default_model or None,
                         draining_taints=tuple(self.draining_taints))
        return less_foreign(spec, foreign.get(spec["name"]))

    async def watch_node_changes(self, changed: asyncio.Event) -> None:
        """Set ``changed`` when a selected Node comes, goes, or changes what ComputeHub reads of it
        (a kubelet's heartbeats do not count), for ever; after an error, watch again a little
        later (the periodic sync goes on regardless)."""
        from kubernetes_asyncio import watch
        seen: dict[str, dict | None] = {}
        while True:
            try:
                core = await self.kube_core()
                async with watch.Watch() as w:
                    async for event in w.stream(core.list_node, label_selector=self.label_selector,
                                                timeout_seconds=300):
                        node = self._client.sanitize_for_serialization(event["object"])
                        name = (node.get("metadata") or {}).get("name")
                        try:
                            now = None if event["type"] == "DELETED" else self.kube_spec(node, {})
                        except NodeSkipped:
                            now = None
                        if name not in seen or seen[name] != now:
                            seen[name] = now
                            changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a watch that breaks is started again
                self.log.debug("node watch ended (%s); watching again", e)
                await asyncio.sleep(min(self.interval, 5.0))

    async def kube_close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class InventoryApp(ServiceClientApp, KubeInventory):
    name = "computehub-inventory"
    description = "Keeps the Kubernetes cluster's nodes and GPUs registered in ComputeHub."
    token_scope = NODES_SCOPE
    aliases = {"config": "InventoryApp.config_file", "url": "InventoryApp.computehub_url",
               "interval": "InventoryApp.interval", "selector": "InventoryApp.label_selector",
               "kubeconfig": "InventoryApp.kubeconfig", "default-model": "InventoryApp.default_model"}
    flags = {"once": ({"InventoryApp": {"once": True}}, "Sync once, then exit: 0 when every selected node "
                      "is registered as Kubernetes describes it, 1 otherwise."),
             "keep-missing": ({"InventoryApp": {"remove_missing": False}}, "Never delete nodes.")}

    interval = Float(30.0, config=True, help="Seconds between syncs (a failed sync is retried after this too).")
    remove_missing = Bool(True, config=True, help="""Delete the nodes this source registered that left the
        cluster (or no longer match label_selector); their workloads are requeued (bool).""")
    once = Bool(False, config=True, help="Sync once and exit (0: all synced, 1: something was not).")

    @validate("interval")
    def _interval_ok(self, proposal):
        return check_number("InventoryApp.interval", proposal.value, low=0, low_open=True, unit="seconds")

    def owned_config_classes(self) -> list[type]:
        return [InventoryApp, KubeInventory]

    @default("log_level")
    def _log_level(self):
        return logging.INFO         # each change is one INFO line: the log is the record of what it did

    @default("log_format")
    def _log_format(self):
        return "[%(levelname)1.1s %(asctime)s %(name)s] %(message)s"

    def initialize(self, argv=None):
        super().initialize(argv)
        recheck(self, ["kubeconfig"])
        self.checked = False            # the token's scope, checked once
        self.said: dict[str, str] = {}  # node -> the last problem logged about it (each is logged once)
        self.exit_code = 0

    # --- one sync ----------------------------------------------------------------------------

    async def check_token(self) -> None:
        try:
            me = await self.client.request("GET", "me")
        except ServiceError as e:
            if e.status in (401, 403):
                raise Fatal(f"the service refused the token ({e.message}); an inventory token needs {NODES_SCOPE} "
                            "and access to the service (hub_ext.hubconfig.configure_jupyterhub(c, "
                            "inventory_services=[...]) grants both)") from None
            raise
        if not me.get("manage_nodes", me.get("admin")):
            raise Fatal(f"the token of {me.get('kind', 'caller')} {me.get('name')!r} lacks the scope {NODES_SCOPE} "
                        "needed to register nodes (hub_ext.hubconfig.configure_jupyterhub(c, "
                        "inventory_services=[...]) grants it)")
        self.checked = True

    def once_per_node(self, name: str, message: str) -> None:
        if self.said.get(name) != message:
            self.log.warning("%s", message)
        self.said[name] = message

    async def sync(self) -> bool:
        """One round: True when the service now matches the cluster. A failed list or service
        call raises (and nothing is deleted this round); one node the service refuses is logged
        and skipped."""
        if not self.checked:
            await self.check_token()
        nodes = await self.kube_nodes()
        foreign = await self.kube_foreign_use()
        wanted, ok = {}, True
        for node in nodes:
            try:
                spec = self.kube_spec(node, foreign)
            except NodeSkipped as e:
                self.once_per_node(str(e.name), f"{e.name}: skipped: {e.reason}")
                ok = False
                continue
            wanted[spec["name"]] = spec
        seen = {str((n.get("metadata") or {}).get("name")) for n in nodes}
        self.said = {k: v for k, v in self.said.items() if k in seen}     # problems of nodes still there
        registered = (await self.client.request("GET", "nodes"))["nodes"]
        by_name = {r["name"]: r for r in registered}
        puts, deletes = diff(wanted, registered)
        for spec in puts:
            name = spec["name"]
            try:
                await self.client.request("PUT", f"nodes/{name}", spec)
            except ServiceError as e:
                self.refused(name, e)
                ok = False
                continue
            self.said.pop(name, None)
            self.log.info("%s: %s", name, what_changed(by_name.get(name), spec))
        if not self.remove_missing:
            return ok
        for name in deletes:
            try:
                r = await self.client.request("DELETE", f"nodes/{name}")
            except ServiceError as e:
                if e.status == 404:         # gone already
                    continue
                self.refused(name, e)
                ok = False
                continue
            lost = r.get("workloads") or []
            self.log.info("%s: removed (left the cluster)%s", name,
                          f"; its workloads were requeued: {', '.join(lost)}" if lost else "")
        return ok

    def refused(self, name: str, e: ServiceError) -> None:
        if e.status in (401, 403):
            raise Fatal(f"the service refused to change node {name}: {e.message}") from None
        if not 400 <= e.status < 500:
            raise e                         # the service is down or failing: retry the round later
        self.once_per_node(name, f"{name}: refused by the service ({e.status} {e.code}): {e.message}")

    # --- run ------------------------------------------------------------------------------------

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.log.info("ComputeHub inventory: registering the Kubernetes nodes%s (GPUs: %s, model label %s, "
                      "kubeconfig %s) in %s, %s", f" matching {self.label_selector!r}" if self.label_selector else "",
                      self.gpu_resource, self.model_label, self.kubeconfig or "in-cluster", self.computehub_url,
                      "once" if self.once else f"every {self.interval:g} s")
        later = "" if self.once else f"; retrying in {self.interval:g} s"
        changed = asyncio.Event()
        watcher = (asyncio.ensure_future(self.watch_node_changes(changed))
                   if self.watch_nodes and not self.once else None)
        try:
            while not stop.is_set():
                changed.clear()
                try:
                    ok = await self.sync()
                except Fatal as e:
                    self.log.error("computehub-inventory: %s", e)
                    self.exit_code = 1
                    return
                except ServiceError as e:
                    ok = False
                    self.log.warning("ComputeHub service: %s (nothing removed%s)", e, later)
                except KubeError as e:
                    ok = False
                    self.log.warning("Kubernetes: could not list nodes: %s (nothing removed%s)", e, later)
                except Exception:
                    ok = False
                    self.log.exception("inventory sync failed (nothing removed%s)", later)
                if self.once:
                    self.exit_code = 0 if ok else 1
                    return
                await self.wait_for_next_sync(stop, changed)
            self.log.info("ComputeHub inventory stopped")
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            await self.kube_close()

    async def wait_for_next_sync(self, stop: asyncio.Event, changed: asyncio.Event) -> None:
        """Until the interval has passed, a Node changed (a beat later, so a burst is one sync),
        or the app is told to stop."""
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(changed.wait())]
        try:
            await asyncio.wait(waits, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED)
            if changed.is_set() and not stop.is_set():
                await asyncio.sleep(WATCH_SETTLE)
        finally:
            for f in waits:
                f.cancel()

    def start(self):
        asyncio.run(self.run())
        self.exit(self.exit_code)


def main(argv=None):
    launch(InventoryApp, argv)


if __name__ == "__main__":
    main()
