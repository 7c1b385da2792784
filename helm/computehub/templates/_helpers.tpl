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

{{/* Where pods in the cluster reach the service directly (not through the proxy). */}}
{{- define "computehub.inClusterUrl" -}}
{{- printf "http://%s.%s.svc:%d/services/%s" (include "computehub.fullname" .) .Release.Namespace (int .Values.service.port) .Values.hub.serviceName -}}
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
  value: {{ .Values.hub.apiUrl | quote }}
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
