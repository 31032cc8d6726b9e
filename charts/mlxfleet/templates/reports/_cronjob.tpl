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
{{- end -}}
