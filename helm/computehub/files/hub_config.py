# ComputeHub's hub side, rendered by the computehub chart (release {{ .Release.Name }}).
# z2jh's hub runs it (hub.extraConfig); the tokens come from the chart's Secret through hub.extraEnv.
import json
import os

from hub_ext.hubconfig import configure_jupyterhub

# The hub's base URL (z2jh hub.baseUrl; the chart's hub.baseUrl must be the same) and where the
# service serves: JupyterHub's proxy routes <base>services/<name>/ to the Service, path kept.
_base = {{ .Values.hub.baseUrl | toJson }}
_name = {{ .Values.hub.serviceName | toJson }}
_service_url = {{ include "computehub.serviceUrl" . | toJson }}
_in_cluster = {{ include "computehub.inClusterUrl" . | toJson }}

# The notebook watch runs inside the hub pod (a managed service). It calls the hub on localhost, as
# z2jh's idle culler does: JupyterHub would give it the `hub` Service, i.e. the hub pod calling itself
# through its Service, which z2jh's hub NetworkPolicy and some CNIs (hairpin) refuse. It calls the
# service at its in-cluster URL, base URL included.
_watch = json.loads({{ .Values.hub.notebookWatch | toJson | toJson }})
if _watch:
    _watch = {"hub_api_url": f"http://127.0.0.1:8081{_base}hub/api", "computehub_url": _in_cluster,
              **({} if _watch is True else _watch)}

configure_jupyterhub(
    c,
    name=_name,
    url=_service_url,
    api_token=os.environ["COMPUTEHUB_API_TOKEN"],
    spawner_api_token=os.environ["COMPUTEHUB_SPAWNER_TOKEN"],
{{- if .Values.launcher.enabled }}
    launcher_api_token=os.environ["COMPUTEHUB_LAUNCHER_TOKEN"],
{{- end }}
{{- if .Values.inventory.enabled }}
    inventory_api_token=os.environ["COMPUTEHUB_INVENTORY_TOKEN"],
{{- end }}
    metrics_api_token=os.environ["COMPUTEHUB_METRICS_TOKEN"],
    admins=json.loads({{ .Values.hub.admins | toJson | toJson }}),
    team_leads=json.loads({{ .Values.hub.teamLeads | toJson | toJson }}),
    notebook_watch=_watch,
)
# The hub's home page links the service under the base URL.
c.JupyterHub.template_vars = {**c.JupyterHub.template_vars, "computehub_url": f"{_base}services/{_name}/"}
# Notebooks go through ComputeHub's queue (QueuedKubeSpawner subclasses KubeSpawner: z2jh's
# c.KubeSpawner settings, singleuser.profileList among them, apply to it); their pods reach the
# service directly.
c.JupyterHub.spawner_class = "spawner.kube.QueuedKubeSpawner"
c.QueuedKubeSpawner.pod_computehub_url = _in_cluster
# The chart's PriorityClasses by ComputeHub class; a class without one gets none (a pod naming a
# PriorityClass that does not exist would be refused).
c.QueuedKubeSpawner.priority_class_names = json.loads({{ include "computehub.priorityClassNames" . | toJson }})
c.QueuedKubeSpawner.priority_class_template = ""
