{{/* The labels every eip object carries, as in manifests/. */}}
{{- define "eip.labels" -}}
app.kubernetes.io/name: eip
app.kubernetes.io/part-of: eip
{{- end }}

{{/* The labels that select eipd's pods. */}}
{{- define "eip.selector" -}}
app.kubernetes.io/name: eip
app.kubernetes.io/component: eipd
{{- end }}

{{/*
How long EipIPUnbound waits: prometheusRule.unboundFor, else the lease
duration plus 5 s, which is when a dead holder's IPs should long be bound
again.
*/}}
{{- define "eip.unboundFor" -}}
{{- $lease := index .Values.config "lease-duration" | default "2s" | toString -}}
{{- if .Values.prometheusRule.unboundFor -}}
{{ .Values.prometheusRule.unboundFor }}
{{- else if regexMatch "^[0-9]+ms$" $lease -}}
{{ add (trimSuffix "ms" $lease | atoi) 5000 }}ms
{{- else if regexMatch "^[0-9]+s$" $lease -}}
{{ add (trimSuffix "s" $lease | atoi) 5 }}s
{{- else -}}
{{ fail (printf "prometheusRule.unboundFor: cannot add 5s to config.lease-duration %q; set prometheusRule.unboundFor" $lease) }}
{{- end -}}
{{- end }}
