{{/* eip's name: the app.kubernetes.io/name label, nameOverride or "eip". */}}
{{- define "eip.name" -}}
{{- .Values.nameOverride | default "eip" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of the names of eip's objects: fullnameOverride, else the name.
eip runs once per cluster, so the release name is no part of it. The
ConfigMap eip-config and the Secret eip-liveness-key keep their names:
eipd's Role grants access to those names alone.
*/}}
{{- define "eip.fullname" -}}
{{- .Values.fullnameOverride | default (include "eip.name" .) | trunc 62 | trimSuffix "-" }}
{{- end }}

{{/* The ServiceAccount eipd runs as. */}}
{{- define "eip.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "eip.fullname" .) }}
{{- else }}
{{- .Values.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/* The labels every eip object carries, as in manifests/. */}}
{{- define "eip.labels" -}}
app.kubernetes.io/name: {{ include "eip.name" . }}
app.kubernetes.io/part-of: eip
{{- end }}

{{/* The labels that select eipd's pods. */}}
{{- define "eip.selector" -}}
app.kubernetes.io/name: {{ include "eip.name" . }}
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

{{/*
The CIDRs the admission policies allow: admission.cidrs, or else those of
config.ranges, each line's CIDR or single address (as a /32 or /128). A
first-last span has no one CIDR: then admission.cidrs must be set.
*/}}
{{- define "eip.admissionCIDRs" -}}
{{- if .Values.admission.cidrs -}}
{{- .Values.admission.cidrs -}}
{{- else -}}
{{- $cidrs := list -}}
{{- range splitList "\n" .Values.config.ranges -}}
{{- $line := trim (first (splitList "#" .)) | replace "\t" " " -}}
{{- if $line -}}
{{- $addr := first (splitList " " $line) -}}
{{- if contains "-" $addr -}}
{{- fail (printf "admission.cidrs: config.ranges has the span %s, which no one CIDR covers; set admission.cidrs to CIDRs that cover every range, comma separated" $addr) -}}
{{- end -}}
{{- if not (contains "/" $addr) -}}
{{- $addr = printf "%s/%s" $addr (ternary "128" "32" (contains ":" $addr)) -}}
{{- end -}}
{{- $cidrs = append $cidrs $addr -}}
{{- end -}}
{{- end -}}
{{- join ", " $cidrs -}}
{{- end -}}
{{- end -}}
