{{/* The name of every object: the release's, with "observer" in it once. */}}
{{- define "observer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "observer.component" -}}
{{- if eq .Values.mode "sidecar" -}}sidecar{{- else -}}central{{- end -}}
{{- end -}}

{{- define "observer.selectorLabels" -}}
app.kubernetes.io/name: observer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ include "observer.component" . }}
{{- end -}}

{{- define "observer.labels" -}}
{{ include "observer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "observer.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "observer.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "observer.fullname" .) -}}
{{- end -}}

{{/* The config's Kubernetes discovery section, or an empty dict. */}}
{{- define "observer.discovery" -}}
{{- $d := .Values.config.discovery | default dict -}}
{{- toYaml ($d.kubernetes | default dict) -}}
{{- end -}}
