"""The Helm chart (helm/computehub), rendered by the real helm binary.

What can be checked without a cluster (no Kubernetes API server, kind or k3s can be had on the test machines):
helm lint, every object against the official Kubernetes 1.33 schemas, what the
pods may do, that the config files it writes load into the real ComputeHub apps,
that its hub side configures a real JupyterHub config, and that bad values are
refused with a message. tests/helm/test_chart_hub.py runs the rendered service
against a real hub.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from chart import CHART, NAMESPACE, ChartError, helm, one, pod_spec, render, secret_data, z2jh_values
from kubernetes_validate import validate
from traitlets.config import Config

from scheduler.model import default_classes

K8S_VERSION = "1.33.0"


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return render(tmp_path_factory.mktemp("chart"))


def workloads(objs):
    return [o for o in objs if o["kind"] in ("Deployment", "StatefulSet", "Pod")]


def test_helm_lint_strict(tmp_path):
    out = helm("lint", "--strict", str(CHART), tmp=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_every_object_validates_against_kubernetes(objs):
    kinds = {o["kind"] for o in objs}
    assert kinds >= {"Deployment", "StatefulSet", "Service", "Secret", "ConfigMap", "ServiceAccount", "Role",
                     "RoleBinding", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "NetworkPolicy"}, kinds
    for o in objs:
        validate(o, K8S_VERSION, strict=True)


def test_no_pod_may_do_more_than_it_needs(objs):
    assert {o["metadata"]["labels"]["app.kubernetes.io/component"] for o in workloads(objs)} == \
        {"service", "launcher", "inventory", "postgresql", "test"}
    for o in workloads(objs):
        spec = pod_spec(o)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
        assert all("hostPath" not in v for v in spec.get("volumes", []))
        # Secret files are root's; a non-root container reads them through its fsGroup.
        for v in spec.get("volumes", []):
            mode = (v.get("secret") or {}).get("defaultMode")
            if mode is not None:
                assert mode & 0o040 and spec["securityContext"].get("fsGroup"), (o["metadata"]["name"], v)
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
            assert not sc.get("privileged")
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            # The root file system is read-only: whatever writes to $HOME or /tmp writes to a volume.
            mounted = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/tmp" in mounted, (o["metadata"]["name"], mounted)
            home = {e["name"]: e.get("value") for e in c.get("env", [])}.get("HOME")
            assert home is None or any(home == p or home.startswith(p + "/") for p in mounted), home
    # Only the launcher and the inventory talk to the Kubernetes API.
    service, pg = one(objs, "Deployment", component="service"), one(objs, "StatefulSet")
    assert pod_spec(service)["automountServiceAccountToken"] is False
    assert pod_spec(pg)["automountServiceAccountToken"] is False
    # The inventory may list nodes and pods, nothing else, anywhere.
    rules = one(objs, "ClusterRole")["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
                     {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    binding = one(objs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "t-computehub-inventory",
                                    "namespace": NAMESPACE}]
    # The launcher's powers are in its namespace only, and never over RBAC or nodes.
    role = one(objs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    granted = {r for rule in role["rules"] for r in rule["resources"]}
    assert not granted & {"roles", "rolebindings", "nodes", "pods/exec", "serviceaccounts"}, granted


def test_priority_classes_are_computehubs_and_never_preempt(objs):
    """One per ComputeHub default class, named as the spawner and launcher name them by default,
    ordered as ComputeHub orders the classes; the kube-scheduler never preempts for them."""
    pcs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PriorityClass"}
    classes = sorted(default_classes(), key=lambda c: c.rank)
    assert set(pcs) == {f"computehub-{c.name}" for c in classes}
    values = [pcs[f"computehub-{c.name}"]["value"] for c in classes]
    assert values == sorted(values) and len(set(values)) == len(values), values
    assert all(p["preemptionPolicy"] == "Never" and p["globalDefault"] is False for p in pcs.values())
    from spawner.kube import QueuedKubeSpawner
    from spawner.launch_kube import KubeLauncher
    for cls in (QueuedKubeSpawner, KubeLauncher):
        template = cls.class_traits()["priority_class_template"].default_value
        assert {template.format(priority=c.name) for c in classes} == set(pcs)


def config_files(objs) -> dict[str, str]:
    return one(objs, "ConfigMap", name="t-computehub")["data"]


def test_the_service_config_loads_into_the_real_service(tmp_path):
    from hub_ext.app import ComputeHubService
    objs = render(tmp_path, values={"service": {
        "cycleInterval": 2, "prices": {"a100": 3.5}, "allowedNodeSelectors": ["zone=east"],
        "queues": [{"name": "org"}, {"name": "vision", "parent": "org", "guaranteed": {"gpu": 8}}],
        "extraConfig": {"EngineConfig": {"preemption": True}, "ComputeHubService": {"long_poll_max": 10}}}})
    (tmp_path / "c.json").write_text(config_files(objs)["computehub_config.json"])
    app = ComputeHubService()
    app.load_config_file(str(tmp_path / "c.json"))
    assert app.cycle_interval == 2 and app.prices == {"a100": 3.5} and app.long_poll_max == 10
    assert app.allowed_node_selectors == ["zone=east"]
    assert [q["name"] for q in app.initial_queues] == ["org", "vision"]
    assert app.config.EngineConfig.preemption is True
    # The command line is the real CLI's: the config file and the database URL from the Secret.
    container = pod_spec(one(objs, "Deployment", component="service"))["containers"][0]
    assert container["command"][:2] == ["computehub", "serve"]
    env = {e["name"]: e for e in container["env"]}
    assert env["COMPUTEHUB_DB_URL"]["valueFrom"]["secretKeyRef"] == {"name": "t-computehub", "key": "db-url"}
    assert secret_data(objs)["db-url"] == (
        f"postgresql+psycopg://computehub:{secret_data(objs)['postgres-password']}@t-computehub-postgresql:5432/"
        "computehub")


def test_mail_is_off_by_default_and_one_block_of_values_sets_it_up(tmp_path):
    from hub_ext.app import ComputeHubService
    (tmp_path / "off.json").write_text(config_files(render(tmp_path))["computehub_config.json"])
    app = ComputeHubService()
    app.load_config_file(str(tmp_path / "off.json"))
    assert not app.mails and app.mail_address_confirmation
    objs = render(tmp_path, values={"service": {"mail": {
        "smtpHost": "smtp.example.org", "smtpPort": 587, "security": "starttls", "username": "computehub",
        "passwordSecret": "smtp", "address": "{user}@example.org", "from": "ComputeHub <ch@example.org>",
        "addresses": {"octocat": "octo@lab.example.org"}, "perUserHour": 20, "userDomains": ["lab.example.org"],
        "confirmAddresses": False, "link": "https://hub.example.org/services/computehub/"}}})
    (tmp_path / "on.json").write_text(config_files(objs)["computehub_config.json"])
    app = ComputeHubService()
    app.load_config_file(str(tmp_path / "on.json"))
    assert app.mails and (app.smtp_host, app.smtp_port, app.smtp_security, app.smtp_username) == (
        "smtp.example.org", 587, "starttls", "computehub")
    assert (app.mail_address, app.mail_from) == ("{user}@example.org", "ComputeHub <ch@example.org>")
    assert app.address_of("octocat") == "octo@lab.example.org" and app.address_of("ada") == "ada@example.org"
    assert app.mail_per_user_hour == 20 and app.mail_user_domains == ["lab.example.org"]
    assert not app.mail_address_confirmation
    env = {e["name"]: e for e in pod_spec(one(objs, "Deployment", component="service"))["containers"][0]["env"]}
    assert env["COMPUTEHUB_SMTP_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "smtp", "key": "smtp-password"}
    assert "COMPUTEHUB_SMTP_PASSWORD" not in env_of(render(tmp_path), "service")


def test_the_stop_deadline_outlasts_the_job_pods_grace(tmp_path):
    """The service stops counting on a victim stopping (stop_deadline) only well after its pod's
    terminationGracePeriodSeconds: 15 minutes, or the grace + 5 minutes; extraConfig wins."""
    from hub_ext.app import ComputeHubService

    def deadline(values):
        (tmp_path / "c.json").write_text(config_files(render(tmp_path, values=values))["computehub_config.json"])
        app = ComputeHubService()
        app.load_config_file(str(tmp_path / "c.json"))
        return app.stop_deadline

    assert deadline({}) == 900
    assert deadline({"launcher": {"terminationGraceSeconds": 3600}}) == 3900
    assert deadline({"launcher": {"terminationGraceSeconds": 3600},
                     "service": {"extraConfig": {"ComputeHubService": {"stop_deadline": 0}}}}) == 0


def test_the_launcher_config_loads_into_the_real_launcher(objs, tmp_path):
    from spawner.launch_kube import KubeLauncher
    from spawner.launcher_app import LauncherApp
    (tmp_path / "l.json").write_text(config_files(objs)["launcher_config.json"])
    app = LauncherApp(computehub_url="http://x/services/computehub", token="t")
    app.load_config_file(str(tmp_path / "l.json"))
    assert app.backend_class is KubeLauncher
    backend = KubeLauncher(parent=app)
    assert backend.namespace == NAMESPACE and backend.termination_grace_seconds == 30
    assert backend.pod_computehub_url == f"http://t-computehub.{NAMESPACE}.svc:10101/services/computehub"
    assert backend.pod_security == "baseline"
    deploy = one(objs, "Deployment", component="launcher")
    assert pod_spec(deploy)["serviceAccountName"] == "t-computehub-launcher"
    assert one(objs, "RoleBinding")["subjects"][0]["name"] == "t-computehub-launcher"


def test_restricted_job_pods_are_one_value(tmp_path):
    """launcher.podSecurity=restricted reaches the real launcher; anything else is refused."""
    from spawner.launch_kube import KubeLauncher
    from spawner.launcher_app import LauncherApp
    (tmp_path / "l.json").write_text(config_files(render(tmp_path, "launcher.podSecurity=restricted"))
                                     ["launcher_config.json"])
    app = LauncherApp(computehub_url="http://x/services/computehub", token="t")
    app.load_config_file(str(tmp_path / "l.json"))
    assert KubeLauncher(parent=app).pod_security == "restricted"
    with pytest.raises(ChartError) as e:
        render(tmp_path, "launcher.podSecurity=strict")
    assert "/launcher/podSecurity" in str(e.value) and "baseline" in str(e.value)


def test_the_hub_side_configures_jupyterhub_with_the_secrets_tokens(tmp_path, monkeypatch):
    """The hub snippet, run as z2jh's hub runs it, with the env the NOTES tell z2jh to set."""
    from hub_ext.scopes import NODES, ON_BEHALF
    objs = render(tmp_path, "hub.admins={ada}", "hub.teamLeads.vision={lin}")
    tokens = secret_data(objs)
    z2jh = z2jh_values(tmp_path, "hub.admins={ada}")
    env = {}
    for name, ref in z2jh["hub"]["extraEnv"].items():
        key = ref["valueFrom"]["secretKeyRef"]
        assert key["name"] == "t-computehub"
        env[name] = tokens[key["key"]]
        monkeypatch.setenv(name, env[name])
    mount = z2jh["hub"]["extraVolumeMounts"][0]
    volume = z2jh["hub"]["extraVolumes"][0]
    assert volume["name"] == mount["name"] and volume["configMap"]["name"] == "t-computehub"
    path = re.search(r'open\("([^"]+)"\)', z2jh["hub"]["extraConfig"]["computehub"]).group(1)
    key = volume["configMap"]["items"][0]
    assert path == f"{mount['mountPath']}/{key['path']}"
    snippet = config_files(objs)[key["key"]]
    c = Config()
    exec(compile(snippet, "computehub_hub_config.py", "exec"), {"c": c})
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert services["computehub"]["url"] == f"http://t-computehub.{NAMESPACE}.svc:10101"
    assert services["computehub"]["api_token"] == tokens["api-token"]
    assert services["computehub-launcher"] == {"name": "computehub-launcher", "api_token": tokens["launcher-token"]}
    assert services["computehub-inventory"]["api_token"] == tokens["inventory-token"]
    assert services["computehub-metrics"]["api_token"] == tokens["metrics-token"]    # helm test's token too
    assert services["computehub-spawner"] == {"name": "computehub-spawner", "api_token": tokens["spawner-token"]}
    assert c.QueueingMixin.computehub_token == tokens["spawner-token"]
    assert len({tokens[k] for k in ("api-token", "spawner-token", "launcher-token", "inventory-token",
                                    "cookie-secret")}) == 5
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["computehub-inventory"]["services"] == ["computehub-inventory"]
    assert NODES in roles["computehub-inventory"]["scopes"] and ON_BEHALF not in roles["computehub-inventory"]["scopes"]
    assert {"computehub-launcher", "computehub-spawner"} <= set(roles["computehub-on-behalf"]["services"])
    assert roles["computehub-admin"]["users"] == ["ada"]
    assert c.JupyterHub.spawner_class == "spawner.kube.QueuedKubeSpawner"
    assert c.QueuedKubeSpawner.pod_computehub_url == f"http://t-computehub.{NAMESPACE}.svc:10101/services/computehub"
    # Notebooks may reach the service through z2jh's NetworkPolicy, and the service's admits them.
    egress = z2jh["singleuser"]["networkPolicy"]["egress"][0]
    svc_labels = one(objs, "Deployment", component="service")["spec"]["template"]["metadata"]["labels"]
    assert egress["to"][0]["podSelector"]["matchLabels"].items() <= svc_labels.items()
    ingress = one(objs, "NetworkPolicy", component="service")["spec"]["ingress"][0]["from"]
    assert any(e.get("key") == "component" and "singleuser-server" in e["values"]
               for f in ingress for e in f["podSelector"].get("matchExpressions", []))


def run_hub_side(objs, monkeypatch) -> Config:
    """The chart's hub side run as z2jh's hub runs it: the Secret's tokens in the env the NOTES set."""
    tokens = secret_data(objs)
    for env, key in (("API", "api"), ("SPAWNER", "spawner"), ("LAUNCHER", "launcher"),
                     ("INVENTORY", "inventory"), ("METRICS", "metrics")):
        monkeypatch.setenv(f"COMPUTEHUB_{env}_TOKEN", tokens[f"{key}-token"])
    c = Config()
    exec(compile(config_files(objs)["computehub_hub_config.py"], "computehub_hub_config.py", "exec"), {"c": c})
    return c


def env_of(objs, component: str) -> dict:
    kind = "Pod" if component == "test" else "Deployment"
    return {e["name"]: e.get("value") for e in pod_spec(one(objs, kind, component=component))["containers"][0]["env"]}


def test_the_base_url_is_in_every_in_cluster_url(tmp_path, monkeypatch):
    """With z2jh's hub.baseUrl /jupyter/, the hub routes and JupyterHub's Service prefixes the service
    under /jupyter/services/computehub/ (jupyterhub.services.service.Service.prefix): the URLs the chart
    gives notebooks, jobs, the launcher, the inventory, helm test, Prometheus and the notebook watch,
    and the hub's API URL, are all under it."""
    from jupyterhub.services.service import Service
    from spawner.notebook_watch import NotebookWatch
    objs = render(tmp_path, "hub.baseUrl=/jupyter/", "metrics.serviceMonitor.enabled=true")
    c = run_hub_side(objs, monkeypatch)
    services = {s["name"]: s for s in c.JupyterHub.services}
    hub_service = Service(**services["computehub"], base_url="/jupyter/")     # as JupyterHub makes it
    assert hub_service.url == f"http://t-computehub.{NAMESPACE}.svc:10101"      # the proxy keeps the path
    prefix = hub_service.prefix
    assert prefix == "/jupyter/services/computehub/"
    url = hub_service.url + prefix.rstrip("/")          # QueueingMixin's default computehub_url in the hub
    service = env_of(objs, "service")
    assert service["JUPYTERHUB_SERVICE_PREFIX"] == prefix
    assert service["JUPYTERHUB_OAUTH_CALLBACK_URL"] == prefix + "oauth_callback"     # Service.oauth_redirect_uri
    assert service["JUPYTERHUB_BASE_URL"] == "/jupyter/"
    assert service["JUPYTERHUB_API_URL"] == "http://hub:8081/jupyter/hub/api"      # z2jh's hub Service
    for component in ("launcher", "inventory", "test"):
        assert env_of(objs, component)["COMPUTEHUB_URL"] == url, component
    assert json.loads(config_files(objs)["launcher_config.json"])["KubeLauncher"]["pod_computehub_url"] == url
    assert c.QueuedKubeSpawner.pod_computehub_url == url
    assert one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == prefix + "metrics"
    assert c.JupyterHub.template_vars["computehub_url"] == prefix            # the hub home page's link
    # The notebook watch (a managed service in the hub pod): the hub on localhost, as z2jh's culler,
    # and the service under the base URL.
    watch = services["computehub-notebooks"]["command"]
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/jupyter/hub/api")     # what JupyterHub gives it
    app = NotebookWatch()
    app.parse_command_line(watch[watch.index("spawner.notebook_watch") + 1:])
    assert app.hub_api_url == "http://127.0.0.1:8081/jupyter/hub/api" and app.computehub_url == url
    # An explicit API URL wins; the base URL is checked.
    objs = render(tmp_path, "hub.baseUrl=/jupyter/", "hub.apiUrl=http://my-hub:8081/jupyter/hub/api")
    assert env_of(objs, "service")["JUPYTERHUB_API_URL"] == "http://my-hub:8081/jupyter/hub/api"


def test_the_default_base_url(objs):
    assert env_of(objs, "service")["JUPYTERHUB_API_URL"] == "http://hub:8081/hub/api"
    assert env_of(objs, "launcher")["COMPUTEHUB_URL"] == f"http://t-computehub.{NAMESPACE}.svc:10101/services/computehub"


def test_notebook_watch_settings_are_kept_and_it_can_be_off(tmp_path, monkeypatch):
    from spawner.notebook_watch import NotebookWatch
    objs = render(tmp_path, values={"hub": {"notebookWatch": {"interval": 60}}})
    watch = {s["name"]: s for s in run_hub_side(objs, monkeypatch).JupyterHub.services}["computehub-notebooks"]
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/hub/api")     # what JupyterHub gives it
    app = NotebookWatch()
    app.parse_command_line(watch["command"][watch["command"].index("spawner.notebook_watch") + 1:])
    assert app.interval == 60 and app.hub_api_url == "http://127.0.0.1:8081/hub/api"
    objs = render(tmp_path, "hub.notebookWatch=false")
    assert "computehub-notebooks" not in {s["name"] for s in run_hub_side(objs, monkeypatch).JupyterHub.services}


@pytest.mark.parametrize("sets, named", [
    ([], True),
    (["priorityClasses.create=false"], False),
    (["priorityClasses.create=false", "priorityClasses.useExisting=true"], True),
])
def test_pods_name_the_priority_classes_that_exist(tmp_path, monkeypatch, sets, named):
    """Notebooks and jobs name the chart's PriorityClasses where they exist (created here, or by another
    release: useExisting), and none where none exist, nor for a ComputeHub class the chart has none
    for (an admin's own): a pod naming a PriorityClass that does not exist is refused."""
    from spawner.kube import QueuedKubeSpawner
    from spawner.launch_kube import KubeLauncher
    from spawner.launcher_app import LauncherApp
    objs = render(tmp_path, *sets)
    assert bool([o for o in objs if o["kind"] == "PriorityClass"]) is ("priorityClasses.create=false" not in sets)
    c = run_hub_side(objs, monkeypatch)
    (tmp_path / "l.json").write_text(config_files(objs)["launcher_config.json"])
    app = LauncherApp(computehub_url="http://x/services/computehub", token="t")
    app.load_config_file(str(tmp_path / "l.json"))
    # The hub's spawner as configured (its priority_class_for, without a Kubernetes client to make).
    spawner = SimpleNamespace(priority_class_names=c.QueuedKubeSpawner.priority_class_names,
                              priority_class_template=c.QueuedKubeSpawner.priority_class_template)
    launcher = KubeLauncher(parent=app)
    for cls in ("interactive", "inference", "training", "preemptible", "urgent"):
        want = f"computehub-{cls}" if named and cls != "urgent" else ""
        assert QueuedKubeSpawner.priority_class_for(spawner, cls) == want, (sets, cls)
        assert launcher.settings({"priority": cls}).priority_class == want, (sets, cls)


def test_the_notes_give_z2jh_only_its_own_keys(tmp_path):
    """Every key the NOTES print is one z2jh's values have, in the shape z2jh takes (its
    jupyterhub.extraEnv helper: a map of strings or EnvVar bodies; the rest lists and maps)."""
    z2jh = z2jh_values(tmp_path, "image.repository=registry.example/computehub", "image.tag=1.2.3",
                       "hub.baseUrl=/jupyter/")
    assert set(z2jh) == {"hub", "proxy", "singleuser"}
    assert set(z2jh["hub"]) == {"image", "baseUrl", "extraEnv", "extraVolumes", "extraVolumeMounts", "extraConfig",
                                "networkPolicy"}
    assert z2jh["hub"]["image"] == {"name": "registry.example/computehub", "tag": "1.2.3"}
    assert z2jh["hub"]["baseUrl"] == "/jupyter/"
    assert all(set(v) == {"valueFrom"} for v in z2jh["hub"]["extraEnv"].values())
    assert all(isinstance(v, str) for v in z2jh["hub"]["extraConfig"].values())
    assert set(z2jh["proxy"]) == {"chp"} and set(z2jh["proxy"]["chp"]) == {"networkPolicy"}
    for policy in (z2jh["hub"]["networkPolicy"], z2jh["proxy"]["chp"]["networkPolicy"],
                   z2jh["singleuser"]["networkPolicy"]):
        assert set(policy) == {"egress"} and isinstance(policy["egress"], list)


def test_the_inventory_lists_no_pods_when_it_does_not_count_them(tmp_path):
    objs = render(tmp_path, "inventory.countOtherPods=false")
    assert one(objs, "ClusterRole")["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                                                  "verbs": ["list", "watch"]}]
    assert json.loads(config_files(objs)["inventory_config.json"])["InventoryApp"]["count_other_pods"] is False


def test_prometheus_may_be_let_in(tmp_path):
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objs = render(tmp_path, values={"networkPolicy": {"allowFrom": [peer]}})
    assert peer in one(objs, "NetworkPolicy", component="service")["spec"]["ingress"][0]["from"]


def test_an_external_database_replaces_the_bundled_one(tmp_path):
    url = "postgresql+psycopg://ch:pw@db.example:5432/computehub"
    objs = render(tmp_path, f"database.url={url}")
    assert not [o for o in objs if o["kind"] == "StatefulSet"]
    assert secret_data(objs)["db-url"] == url
    objs = render(tmp_path, "database.existingSecret=my-db", "postgresql.enabled=false")
    env = {e["name"]: e for e in pod_spec(one(objs, "Deployment", component="service"))["containers"][0]["env"]}
    assert env["COMPUTEHUB_DB_URL"]["valueFrom"]["secretKeyRef"] == {"name": "my-db", "key": "db-url"}
    assert "db-url" not in secret_data(objs)


def test_optional_parts_can_be_left_out(tmp_path):
    objs = render(tmp_path, "launcher.enabled=false", "inventory.enabled=false", "priorityClasses.create=false",
                  "networkPolicy.enabled=false", "metrics.dashboard.enabled=true", "metrics.serviceMonitor.enabled=true")
    assert {o["metadata"]["labels"]["app.kubernetes.io/component"] for o in workloads(objs)} == \
        {"service", "postgresql", "test"}
    assert not [o for o in objs if o["kind"] in ("Role", "ClusterRole", "PriorityClass", "NetworkPolicy")]
    snippet = config_files(objs)["computehub_hub_config.py"]
    assert "LAUNCHER_TOKEN" not in snippet and "INVENTORY_TOKEN" not in snippet and "METRICS_TOKEN" in snippet
    monitor = one(objs, "ServiceMonitor")["spec"]
    assert monitor["endpoints"][0]["path"] == "/services/computehub/metrics"
    assert monitor["endpoints"][0]["authorization"]["credentials"]["key"] in secret_data(objs)
    assert monitor["selector"]["matchLabels"].items() <= \
        one(objs, "Deployment", component="service")["spec"]["template"]["metadata"]["labels"].items()
    assert 'priority_class_template = ""' in snippet
    dashboard = json.loads(one(objs, "ConfigMap", name="t-computehub-dashboard")["data"]["computehub.json"])
    assert dashboard["panels"] and one(objs, "ConfigMap", name="t-computehub-dashboard")["metadata"]["labels"][
        "grafana_dashboard"] == "1"


@pytest.mark.parametrize("sets, message", [
    (["postgresql.enabled=false"], "no database. Keep postgresql.enabled, or set database.url"),
    (["database.url=mysql://db/x"], "/database/url"),
    (["service.cycleInterval=0"], "/service/cycleInterval"),
    (["servce.port=1"], "additional properties 'servce' not allowed"),
    (["hub.baseUrl=jupyter"], "/hub/baseUrl"),
    (["hub.apiUrl=hub:8081"], "/hub/apiUrl"),
    (["hub.release=JHub"], "/hub/release"),
    (["priorityClasses.useExisting=yes"], "/priorityClasses/useExisting"),
    (["service.allowedNodeSelectors={zone}"], "/service/allowedNodeSelectors/0"),
    (["priorityClasses.values.training=0"], "/priorityClasses/values/training"),
    (["service.mail.address=team@example.org"], "/service/mail/address"),
    (["service.mail.security=ssl"], "/service/mail/security"),
    (["service.mail.userDomains={not a domain}"], "/service/mail/userDomains/0"),
])
def test_bad_values_are_refused_with_what_is_wrong(tmp_path, sets, message):
    with pytest.raises(ChartError) as e:
        render(tmp_path, *sets)
    assert message in str(e.value)
