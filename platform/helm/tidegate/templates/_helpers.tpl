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
{{- end -}}
