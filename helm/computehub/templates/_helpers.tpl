{{/* Names: "<release>-computehub" unless the release is already called so. */}}
{{- define "computehub.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains "computehub" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-computehub" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "computehub.labels" -}}
app.kubernetes.io/name: computehub
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component (service, launcher, inventory, postgresql). */}}
{{- define "computehub.selector" -}}
app.kubernetes.io/name: computehub
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "computehub.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The service's Service, as the hub registers it (JupyterHub's proxy routes <baseUrl>services/<name>/
     to it with the path kept). */}}
{{- define "computehub.serviceUrl" -}}
{{- printf "http://%s.%s.svc:%d" (include "computehub.fullname" .) .Release.Namespace (int .Values.service.port) -}}
{{- end -}}

{{/* Where pods in the cluster reach the service directly (not through the proxy): it serves under
     the hub's prefix, <baseUrl>services/<name> (JUPYTERHUB_SERVICE_PREFIX), so the base URL is in it. */}}
{{- define "computehub.inClusterUrl" -}}
{{- printf "%s%sservices/%s" (include "computehub.serviceUrl" .) .Values.hub.baseUrl .Values.hub.serviceName -}}
{{- end -}}

{{/* The hub's REST API as ComputeHub's pods reach it: z2jh's `hub` Service, port 8081, under the base URL. */}}
{{- define "computehub.hubApiUrl" -}}
{{- .Values.hub.apiUrl | default (printf "http://hub:8081%shub/api" .Values.hub.baseUrl) -}}
{{- end -}}

{{/* The PriorityClass of each ComputeHub class (priorityClasses.values) as JSON, where the classes exist
     (this release creates them, or another one did: useExisting), else {}. Pods of a class not named
     here get none (not "computehub-<class>": a pod naming a missing PriorityClass is refused). */}}
{{- define "computehub.priorityClassNames" -}}
{{- $names := dict -}}
{{- if or .Values.priorityClasses.create .Values.priorityClasses.useExisting -}}
{{- range $class, $_ := .Values.priorityClasses.values -}}
{{- $_ := set $names $class (printf "computehub-%s" $class) -}}
{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{- define "computehub.secretName" -}}
{{- include "computehub.fullname" . -}}
{{- end -}}

{{/* Keep a generated secret value across upgrades: the value in the Secret already there, else a new one. */}}
{{- define "computehub.keep" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace (include "computehub.secretName" .root) -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}

{{/* Security context of every ComputeHub container: no root, no privilege, nothing writable but volumes. */}}
{{- define "computehub.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Env naming the hub, for every ComputeHub pod. */}}
{{- define "computehub.hubEnv" -}}
- name: JUPYTERHUB_API_URL
  value: {{ include "computehub.hubApiUrl" . | quote }}
- name: JUPYTERHUB_BASE_URL
  value: {{ .Values.hub.baseUrl | quote }}
{{- end -}}

{{- define "computehub.podCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
