{{/* report.yaml's `delivery` section from reports.delivery (empty when it is off). */}}
{{- define "mlxfleet.reportDelivery" -}}
{{- $d := .Values.reports.delivery -}}
{{- if $d.enabled -}}
{{- $out := dict "attempts" $d.attempts "backoffSeconds" $d.backoffSeconds -}}
{{- with $d.email -}}
{{- if .to -}}
{{- $email := dict "to" .to "from" .from "smtpHost" .smtpHost "security" .security "subjectPrefix" .subjectPrefix -}}
{{- if .smtpPort }}{{ $_ := set $email "smtpPort" .smtpPort }}{{ end -}}
{{- if .caConfigMap }}{{ $_ := set $email "caFile" "/etc/mlxfleet-smtp-ca/ca.crt" }}{{ end -}}
{{- $_ := set $out "email" $email -}}
{{- end -}}
{{- end -}}
{{- if $d.webhook.enabled }}{{ $_ := set $out "webhook" (dict "enabled" true) }}{{ end -}}
{{- if not (or (hasKey $out "email") (hasKey $out "webhook")) -}}
{{- fail "reports.delivery.enabled: give reports.delivery.email.to or reports.delivery.webhook.enabled" -}}
{{- end -}}
{{- with $d.pushgateway }}{{ $_ := set $out "pushgateway" . }}{{ end -}}
{{- toYaml (dict "delivery" $out) -}}
{{- end -}}
{{- end -}}

{{/* One report CronJob: (dict "root" $ "kind" "weekly"|"monthly" "schedule" "..."). */}}
{{- define "mlxfleet.reportCronJob" -}}
{{- $ := .root -}}
apiVersion: batch/v1
kind: CronJob
metadata:
  name: {{ include "mlxfleet.fullname" $ }}-{{ .kind }}-report
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "mlxfleet.reportLabels" $ | nindent 4 }}
spec:
  schedule: {{ .schedule | quote }}
  timeZone: {{ $.Values.reports.timeZone }}
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: 3600
  successfulJobsHistoryLimit: 3
  failedJobsHistoryLimit: 3
  jobTemplate:
    spec:
      backoffLimit: 3
      activeDeadlineSeconds: 1800
      ttlSecondsAfterFinished: 604800
      template:
        metadata:
          labels:
            {{- include "mlxfleet.reportLabels" $ | nindent 12 }}
        spec:
          restartPolicy: OnFailure
          serviceAccountName: {{ include "mlxfleet.reportsServiceAccount" $ }}  # may only list InferenceNodes (rbac.yaml)
          automountServiceAccountToken: true
          {{- with $.Values.imagePullSecrets }}
          imagePullSecrets:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            runAsNonRoot: true
            runAsUser: 65532
            runAsGroup: 65532
            seccompProfile:
              type: RuntimeDefault
          containers:
            - name: report
              image: {{ include "mlxfleet.image" $ }}
              imagePullPolicy: {{ $.Values.image.pullPolicy }}
              command:
                - mlxfleet
                - report
                - {{ .kind }}
                - --from-cluster
                - --config=/etc/mlxfleet/report.yaml
                - --out=/tmp/reports
                - --write-back
              envFrom:
                - configMapRef:
                    name: {{ include "mlxfleet.fullname" $ }}-reports
                - secretRef:
                    name: {{ $.Values.reports.credentialsSecret }}
                {{- if $.Values.reports.delivery.enabled }}
                # the SMTP login and/or the webhook URL (reports.delivery)
                - secretRef:
                    name: {{ $.Values.reports.delivery.credentialsSecret }}
                {{- end }}
              env:
                - name: HOME
                  value: /tmp
              resources:
                {{- toYaml $.Values.reports.resources | nindent 16 }}
              securityContext:
                allowPrivilegeEscalation: false
                readOnlyRootFilesystem: true
                capabilities:
                  drop: ["ALL"]
              volumeMounts:
                - name: config
                  mountPath: /etc/mlxfleet
                  readOnly: true
                - name: tmp
                  mountPath: /tmp
                {{- if and $.Values.reports.delivery.enabled $.Values.reports.delivery.email.caConfigMap }}
                - name: smtp-ca
                  mountPath: /etc/mlxfleet-smtp-ca
                  readOnly: true
                {{- end }}
          volumes:
            - name: config
              configMap:
                name: {{ include "mlxfleet.fullname" $ }}-reports
                items:
                  - key: report.yaml
                    path: report.yaml
            - name: tmp
              emptyDir:
                sizeLimit: 256Mi
            {{- if and $.Values.reports.delivery.enabled $.Values.reports.delivery.email.caConfigMap }}
            - name: smtp-ca
              configMap:
                name: {{ $.Values.reports.delivery.email.caConfigMap }}
                items:
                  - key: ca.crt
                    path: ca.crt
            {{- end }}
{{- end -}}
