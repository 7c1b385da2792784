# ComputeHub's hub side, rendered by the computehub chart (release {{ .Release.Name }}).
# z2jh's hub runs it (hub.extraConfig); the tokens come from the chart's Secret through hub.extraEnv.
import json
import os

from hub_ext.hubconfig import configure_jupyterhub

configure_jupyterhub(
    c,
    name={{ .Values.hub.serviceName | toJson }},
    url={{ printf "http://%s.%s.svc:%d" (include "computehub.fullname" .) .Release.Namespace (int .Values.service.port) | toJson }},
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
    notebook_watch=json.loads({{ .Values.hub.notebookWatch | toJson | toJson }}),
)
# Notebooks go through ComputeHub's queue; their pods reach the service directly.
c.JupyterHub.spawner_class = "spawner.kube.QueuedKubeSpawner"
c.QueuedKubeSpawner.pod_computehub_url = {{ include "computehub.inClusterUrl" . | toJson }}
c.QueuedKubeSpawner.priority_class_template = {{ ternary "computehub-{priority}" "" .Values.priorityClasses.create | toJson }}
