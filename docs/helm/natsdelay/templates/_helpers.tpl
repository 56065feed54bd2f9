{{/* The name of every object: the release's, with natsdelay unless it says so. */}}
{{- define "natsdelay.fullname" -}}
{{- if contains "natsdelay" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-natsdelay" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "natsdelay.headless" -}}
{{- printf "%s-headless" (include "natsdelay.fullname" .) -}}
{{- end -}}

{{- define "natsdelay.selectorLabels" -}}
app.kubernetes.io/name: natsdelay
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "natsdelay.labels" -}}
{{ include "natsdelay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The stable DNS name of pod i under the headless Service. */}}
{{- define "natsdelay.podHost" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%d.%s.%s.svc" (include "natsdelay.fullname" $root) (index . 1) (include "natsdelay.headless" $root) $root.Release.Namespace -}}
{{- end -}}

{{/* Every member's Raft address, comma-separated: --cluster-peers. */}}
{{- define "natsdelay.peers" -}}
{{- $out := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $out = append $out (printf "%s:%d" (include "natsdelay.podHost" (list $ $i)) (int $.Values.ports.cluster)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* Every embedded nats-server's route URL: --nats-routes. */}}
{{- define "natsdelay.routes" -}}
{{- $out := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $out = append $out (printf "nats://%s:%d" (include "natsdelay.podHost" (list $ $i)) (int $.Values.ports.routes)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "natsdelay.clustered" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end -}}
{{- end -}}
