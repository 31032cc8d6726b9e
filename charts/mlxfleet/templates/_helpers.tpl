{{/* Names, labels and guards shared by every template of the mlxfleet chart. */}}

{{- define "mlxfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name, plus the chart name unless it is in it. */}}
{{- define "mlxfleet.fullname" -}}
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

{{- define "mlxfleet.operatorName" -}}
{{- printf "%s-operator" (include "mlxfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mlxfleet.gatewayName" -}}
{{- printf "%s-gateway" (include "mlxfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mlxfleet.operatorServiceAccount" -}}
{{- default (include "mlxfleet.operatorName" .) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{- define "mlxfleet.reportsServiceAccount" -}}
{{- default (printf "%s-reports" (include "mlxfleet.fullname" .) | trunc 63 | trimSuffix "-") .Values.reports.serviceAccount.name -}}
{{- end -}}

{{- define "mlxfleet.secretsNamespace" -}}
{{- default .Release.Namespace .Values.operator.agentSecretsNamespace -}}
{{- end -}}

{{/* Labels on every object. helm.sh/chart and managed-by are dropped from the kustomize base. */}}
{{- define "mlxfleet.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mlxfleet
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "mlxfleet.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "mlxfleet.commonLabels" . }}
{{- end -}}

{{/* Selector of the operator pods (as in the kustomize base, so `kubectl apply -k` upgrades). */}}
{{- define "mlxfleet.operatorSelector" -}}
app.kubernetes.io/name: {{ include "mlxfleet.name" . }}-operator
{{- end -}}

{{- define "mlxfleet.operatorLabels" -}}
{{ include "mlxfleet.operatorSelector" . }}
app.kubernetes.io/component: operator
{{ include "mlxfleet.labels" . }}
{{- end -}}

{{- define "mlxfleet.gatewaySelector" -}}
app.kubernetes.io/name: {{ include "mlxfleet.name" . }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mlxfleet.gatewayLabels" -}}
{{ include "mlxfleet.gatewaySelector" . }}
app.kubernetes.io/component: gateway
{{ include "mlxfleet.commonLabels" . }}
{{- end -}}

{{- define "mlxfleet.reportLabels" -}}
app.kubernetes.io/name: {{ include "mlxfleet.name" . }}-reports
app.kubernetes.io/component: reports
{{ include "mlxfleet.labels" . }}
{{- end -}}

{{/* An image reference: repository:tag, plus @digest when one is given (a released chart pins
its images by digest). Called with (list repository tag digest). */}}
{{- define "mlxfleet.imageRef" -}}
{{- $repository := index . 0 -}}{{- $tag := index . 1 -}}{{- $digest := index . 2 -}}
{{- printf "%s:%s" $repository $tag -}}{{- with $digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* The operator image (operator Deployment, report CronJobs). */}}
{{- define "mlxfleet.image" -}}
{{- include "mlxfleet.imageRef" (list .Values.image.repository (default .Chart.AppVersion .Values.image.tag) .Values.image.digest) -}}
{{- end -}}

{{/* The gateway's own image; its tag falls back to image.tag, then the appVersion. */}}
{{- define "mlxfleet.gatewayImage" -}}
{{- $image := .Values.gateway.image -}}
{{- include "mlxfleet.imageRef" (list $image.repository (default (default .Chart.AppVersion .Values.image.tag) $image.tag) $image.digest) -}}
{{- end -}}

{{/* Whether the operator image of this chart has Lease leader election (Chart.yaml). */}}
{{- define "mlxfleet.leaderElection" -}}
{{- if .Values.operator.leaderElection.enabled -}}
{{- if ne (index .Chart.Annotations "mlxfleet.io/operator-leader-election") "true" -}}
{{- fail "operator.leaderElection.enabled: this operator image has no Lease leader election; set it false (one standalone replica)" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* Operator replicas: more than one only with leader election (no two standalone operators). */}}
{{- define "mlxfleet.operatorReplicas" -}}
{{- $replicas := int .Values.operator.replicas -}}
{{- if and (gt $replicas 1) (not (include "mlxfleet.leaderElection" .)) -}}
{{- fail (printf "operator.replicas: %d needs operator.leaderElection.enabled=true; without leader election only 1 replica is allowed (two standalone operators would both act)" $replicas) -}}
{{- end -}}
{{- $replicas -}}
{{- end -}}

{{/* Refuse the gateway until the image has it (Chart.yaml annotation mlxfleet.io/gateway). */}}
{{- define "mlxfleet.gatewayEnabled" -}}
{{- if .Values.gateway.enabled -}}
{{- if ne (index .Chart.Annotations "mlxfleet.io/gateway") "true" -}}
{{- fail "gateway.enabled: mlxfleet-gateway is not in this image yet (issue 9); leave it false" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* Pod and container security settings the `restricted` Pod Security Standard requires. */}}
{{- define "mlxfleet.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mlxfleet.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}
