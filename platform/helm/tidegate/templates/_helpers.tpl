{{- define "tidegate.labels" -}}
app.kubernetes.io/name: tidegate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "tidegate.env" -}}
envFrom:
  - secretRef:
      name: {{ .Values.existingSecret }}
env:
{{- range $key, $value := .Values.env }}
  - name: {{ $key }}
    value: {{ $value | quote }}
{{- end }}
  # every pod agrees on the task time limits (the workers' shutdown grace is set from them)
  - name: CELERY_TASK_TIME_LIMIT
    value: {{ .Values.tasks.timeLimit | quote }}
  - name: CELERY_TASK_SOFT_TIME_LIMIT
    value: {{ .Values.tasks.softTimeLimit | quote }}
  {{- if .Values.metrics.enabled }}
  # every process of the pod counts into files here; a scrape adds them up
  - name: PROMETHEUS_MULTIPROC_DIR
    value: /metrics-data
  {{- end }}
{{- end -}}

{{- /* The emptyDir where the processes of a pod keep their metric counts. */ -}}
{{- define "tidegate.metricsVolume" -}}
{{- if .Values.metrics.enabled }}
- {name: metrics-data, emptyDir: {}}
{{- end }}
{{- end -}}


{{- /* Pods run as a numeric non-root user, no privilege escalation, read-only root
filesystem (writable /tmp only), seccomp RuntimeDefault. */ -}}
{{- define "tidegate.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "tidegate.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: ["ALL"]}
volumeMounts:
  - {name: tmp, mountPath: /tmp}
  {{- if .Values.metrics.enabled }}
  - {name: metrics-data, mountPath: /metrics-data}
  {{- end }}
{{- end -}}
