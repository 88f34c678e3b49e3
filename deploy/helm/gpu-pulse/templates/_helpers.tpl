{{/*
Names. Every object is named <fullname>-<part> (gpu-pulse-exporter, gpu-pulse-adapter, ...), where the fullname is
Helm's usual one: fullnameOverride, else the release's name where it contains the chart's name (nameOverride or
gpu-pulse), else <release>-<name>; cut at 63 characters. The APIServices keep their names (v1beta2.custom.metrics.k8s.io
is one per cluster: one release per cluster) and point at the renamed Service.
What does not follow the names: the Prometheus job labels the shipped rules and dashboards select
(gpu-pulse.exporter.job, below), and the labels the adapter finds the exporters by (gpu-pulse.exporter.stableSelector).
*/}}
{{- define "gpu-pulse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "gpu-pulse.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpu-pulse.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The longest name that must be a DNS label (63 characters, a letter first: a Service's name) is <fullname>-exporter:
a fullname that cannot carry it is refused here, with what to set, rather than by the API server at install.
*/}}
{{- define "gpu-pulse.checkNames" -}}
{{- $fullname := include "gpu-pulse.fullname" . -}}
{{- if or (gt (len $fullname) 54) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname)) -}}
{{- fail (printf "the objects' names would start with %q (%s), which must be a DNS label of at most 54 characters (the Service %s-exporter is one): set fullnameOverride, e.g. fullnameOverride=gpu-pulse" $fullname (ternary "fullnameOverride" "the release's name and nameOverride" (not (empty .Values.fullnameOverride))) $fullname) -}}
{{- end -}}
{{- end }}

{{/* Each component's objects: <fullname>-exporter, <fullname>-adapter. */}}
{{- define "gpu-pulse.exporter.fullname" -}}
{{- printf "%s-exporter" (include "gpu-pulse.fullname" .) -}}
{{- end }}

{{- define "gpu-pulse.adapter.fullname" -}}
{{- printf "%s-adapter" (include "gpu-pulse.fullname" .) -}}
{{- end }}

{{/*
The Prometheus job of each component's targets, whatever the names: the job names the shipped rules and dashboards
select (rules/jobs.py, DEFAULT_EXPORTER_JOB and DEFAULT_ADAPTER_JOB). Each Service and pod carries it as the label
gpu-pulse.dev/job, which the ServiceMonitors and the PodMonitor name as their jobLabel.
*/}}
{{- define "gpu-pulse.exporter.job" -}}gpu-pulse-exporter{{- end }}
{{- define "gpu-pulse.adapter.job" -}}gpu-pulse-adapter{{- end }}

{{- define "gpu-pulse.labels" -}}
app.kubernetes.io/part-of: gpu-pulse
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
What the workloads select their pods by (and the Services, PodDisruptionBudget, NetworkPolicies, monitors): the
name label, <name>-exporter (nameOverride renames it). A workload's selector cannot change in place: set nameOverride
at install (docs/install.md, "Names").
*/}}
{{- define "gpu-pulse.exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-pulse.name" . }}-exporter
{{- end }}

{{- define "gpu-pulse.adapter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-pulse.name" . }}-adapter
{{- end }}

{{/*
The exporter pods' labels that no override changes (app.kubernetes.io/part-of comes with gpu-pulse.labels and
commonLabels cannot replace either): the adapter's --exporter-selector.
*/}}
{{- define "gpu-pulse.exporter.stableSelector" -}}
app.kubernetes.io/component=exporter,app.kubernetes.io/part-of=gpu-pulse
{{- end }}

{{- define "gpu-pulse.exporter.labels" -}}
{{ include "gpu-pulse.exporter.selectorLabels" . }}
app.kubernetes.io/component: exporter
gpu-pulse.dev/job: {{ include "gpu-pulse.exporter.job" . }}
{{ include "gpu-pulse.labels" . }}
{{- end }}

{{- define "gpu-pulse.adapter.labels" -}}
{{ include "gpu-pulse.adapter.selectorLabels" . }}
app.kubernetes.io/component: adapter
gpu-pulse.dev/job: {{ include "gpu-pulse.adapter.job" . }}
{{ include "gpu-pulse.labels" . }}
{{- end }}

{{/* <registry>/<repository>:<tag>, or <registry>/<repository>@<digest> where a digest pins it */}}
{{- define "gpu-pulse.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $name := $image.repository -}}
{{- with $root.Values.image.registry }}{{ $name = printf "%s/%s" (trimSuffix "/" .) $name }}{{ end -}}
{{- if $image.digest -}}
{{ printf "%s@%s" $name $image.digest }}
{{- else -}}
{{ printf "%s:%s" $name ($root.Values.image.tag | default $root.Chart.AppVersion) }}
{{- end -}}
{{- end }}

{{/* imagePullSecrets, and image.pullSecrets (its former name) */}}
{{- define "gpu-pulse.pullSecrets" -}}
{{- with concat (.Values.imagePullSecrets | default list) (.Values.image.pullSecrets | default list) | uniq }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The exporter's auth and TLS choices that exclude each other, or that the adapter's direct source cannot follow: a
clear error at render time rather than exporters that refuse to start or an adapter that cannot read them.
*/}}
{{- define "gpu-pulse.exporter.checkSecurity" -}}
{{- $auth := .Values.exporter.auth -}}
{{- $modes := list -}}
{{- if $auth.enabled }}{{ $modes = append $modes "exporter.auth.enabled" }}{{ end -}}
{{- if $auth.bearerTokenSecret }}{{ $modes = append $modes "exporter.auth.bearerTokenSecret" }}{{ end -}}
{{- if $auth.basicAuthSecret }}{{ $modes = append $modes "exporter.auth.basicAuthSecret" }}{{ end -}}
{{- if gt (len $modes) 1 -}}
{{- fail (printf "%s exclude each other (the exporter takes one auth mode): set exporter.auth.enabled=false with a Secret" (join " and " $modes)) -}}
{{- end -}}
{{- if ne .Values.adapter.source "prometheus" -}}
{{- if $auth.basicAuthSecret -}}
{{- fail "exporter.auth.basicAuthSecret needs adapter.source=prometheus: the adapter reads the exporters with a bearer token only" -}}
{{- end -}}
{{- if .Values.exporter.tls.secretName -}}
{{- fail "exporter.tls.secretName needs adapter.source=prometheus: the adapter reaches each exporter at its pod IP, which a certificate shared by all exporters cannot name" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The DNS names the kube-apiserver uses for the adapter's Service, which its certificate must carry. */}}
{{- define "gpu-pulse.adapter.dnsNames" -}}
{{- $service := include "gpu-pulse.adapter.fullname" . -}}
{{- list (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) | toJson -}}
{{- end }}

{{/* The Secret of the adapter's serving certificate (and of its CA, ca.crt). */}}
{{- define "gpu-pulse.adapter.tlsSecret" -}}
{{- printf "%s-tls" (include "gpu-pulse.adapter.fullname" .) -}}
{{- end }}

{{/*
The adapter's serving certificate when cert-manager does not issue it: {"ca": PEM, "cert": PEM, "key": PEM}.
Kept while its Secret exists (lookup on upgrades); generated once per render otherwise, and remembered for the rest
of the render in .Values (one map for every template), so that the Secret, the APIServices' caBundle and the
Deployment's checksum all hold the same pair.
*/}}
{{- define "gpu-pulse.adapter.tls" -}}
{{- if not (hasKey .Values "__generatedTls") -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "gpu-pulse.adapter.tlsSecret" .) -}}
{{- $data := dict -}}
{{- if $secret -}}{{- $data = $secret.data | default dict -}}{{- end -}}
{{- if and (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key") -}}
{{- $_ := set .Values "__generatedTls" (dict "ca" (index $data "ca.crt" | b64dec) "cert" (index $data "tls.crt" | b64dec) "key" (index $data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $days := int .Values.adapter.tls.validityDays -}}
{{- $ca := genCA (printf "%s-ca" (include "gpu-pulse.fullname" .)) $days -}}
{{- $names := include "gpu-pulse.adapter.dnsNames" . | fromJsonArray -}}
{{- $cert := genSignedCert (first $names) nil $names $days $ca -}}
{{- $_ := set .Values "__generatedTls" (dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key) -}}
{{- end -}}
{{- end -}}
{{- toJson (get .Values "__generatedTls") -}}
{{- end }}

{{/*
The node label the GPU Operator pauses the exporter by (gpuOperator.pauseProtocol), or "" when the protocol is off. A
deployLabel of "" (how 0.1.0 turned it off) keeps it off.
*/}}
{{- define "gpu-pulse.exporter.pauseLabel" -}}
{{- if .Values.gpuOperator.pauseProtocol }}{{ .Values.gpuOperator.deployLabel }}{{ end -}}
{{- end }}

{{/* The exporter's namespace: its own (Pod Security privileged), or the release's. */}}
{{- define "gpu-pulse.exporter.namespace" -}}
{{- .Values.exporter.namespace | default .Release.Namespace -}}
{{- end }}

{{/* The components' ServiceAccounts: the chart's, or the user's (serviceAccount.create: false, name). */}}
{{- define "gpu-pulse.exporter.serviceAccountName" -}}
{{- .Values.exporter.serviceAccount.name | default (include "gpu-pulse.exporter.fullname" .) -}}
{{- end }}

{{- define "gpu-pulse.adapter.serviceAccountName" -}}
{{- .Values.adapter.serviceAccount.name | default (include "gpu-pulse.adapter.fullname" .) -}}
{{- end }}

{{/* The adapter's ServiceAccount as a Kubernetes user name: the one identity the exporters serve /pods to. */}}
{{- define "gpu-pulse.adapter.user" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpu-pulse.adapter.serviceAccountName" .) -}}
{{- end }}

{{/*
A security context or probe: the chart's own (a YAML string) with the user's value merged over it, key by key.
(list <chart's YAML> <user's map>)
*/}}
{{- define "gpu-pulse.merged" -}}
{{- $own := fromYaml (index . 0) -}}
{{- toYaml (mergeOverwrite $own (deepCopy (index . 1 | default dict))) -}}
{{- end }}

{{/* The exporter's command line. */}}
{{- define "gpu-pulse.exporter.args" -}}
- --listen=0.0.0.0:{{ .Values.exporter.port }}
- --dialect={{ .Values.exporter.dialect }}
- --interval={{ .Values.exporter.interval }}
- --field-set={{ .Values.exporter.fieldSet }}
- --log-format=json
{{- if .Values.exporter.auth.enabled }}
- --auth-allowed-users={{ include "gpu-pulse.adapter.user" . }}
- --auth-token-audience={{ .Values.exporter.auth.audience }}
{{- else if .Values.exporter.auth.bearerTokenSecret }}
- --auth-bearer-token-file=/var/run/secrets/gpu-pulse/auth/token
{{- else if .Values.exporter.auth.basicAuthSecret }}
- --auth-basic-file=/var/run/secrets/gpu-pulse/auth/auth
{{- end }}
{{- if .Values.exporter.tls.secretName }}
- --tls-cert-file=/var/run/gpu-pulse-exporter/tls/tls.crt
- --tls-private-key-file=/var/run/gpu-pulse-exporter/tls/tls.key
{{- end }}
{{- if include "gpu-pulse.exporter.kubernetes" . }}
- --kubernetes
{{- end }}
{{- if .Values.engines.enabled }}
- --engines
- --engine-interval={{ .Values.engines.interval }}
{{- end }}
{{- with .Values.exporter.podLabelsAllowlist }}
- --pod-labels={{ . }}
{{- end }}
{{- if .Values.exporter.collectors }}
- --collectors=/etc/gpu-pulse-exporter/collectors/collectors
{{- end }}
{{- range .Values.exporter.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The exporter talks to the Kubernetes API (its node's pods and ResourceSlices) for shared GPUs, for DRA, to find the
serving engines of its GPU pods (their IPs and annotations), and for the pod labels it copies onto series. */}}
{{- define "gpu-pulse.exporter.kubernetes" -}}
{{- if or .Values.sharedGpus.enabled .Values.dra.enabled .Values.engines.enabled .Values.exporter.podLabelsAllowlist }}true{{ end }}
{{- end }}

{{/* The exporter needs an API token for its TokenReviews (auth) or its watches (shared GPUs, DRA). */}}
{{- define "gpu-pulse.exporter.apiToken" -}}
{{- if or .Values.exporter.auth.enabled (include "gpu-pulse.exporter.kubernetes" .) }}true{{ end }}
{{- end }}

{{/* The adapter reads the exporters (source direct) and shows them a token (exporter.auth). */}}
{{- define "gpu-pulse.adapter.exporterToken" -}}
{{- if and .Values.exporter.auth.enabled (ne .Values.adapter.source "prometheus") }}true{{ end }}
{{- end }}

{{/* The Secret of the exporters' static auth (bearer token or basic), if one. */}}
{{- define "gpu-pulse.exporter.authSecret" -}}
{{- if not .Values.exporter.auth.enabled }}{{ .Values.exporter.auth.bearerTokenSecret | default .Values.exporter.auth.basicAuthSecret }}{{ end -}}
{{- end }}

{{/* The adapter shows the exporters the bearer token of exporter.auth.bearerTokenSecret (direct source). */}}
{{- define "gpu-pulse.adapter.exporterSecretToken" -}}
{{- if and (not .Values.exporter.auth.enabled) .Values.exporter.auth.bearerTokenSecret (ne .Values.adapter.source "prometheus") }}true{{ end -}}
{{- end }}

{{/*
prometheus-adapter's rules (values `rules`): non-empty when any is asked for.
*/}}
{{- define "gpu-pulse.adapter.rules" -}}
{{- if or .Values.rules.default .Values.rules.custom .Values.rules.external -}}true{{- end -}}
{{- end }}

{{/*
The configuration file prometheus-adapter's chart writes from the same values: its default rules
(prometheus-community/helm-charts charts/prometheus-adapter templates/configmap.yaml, rules.default), then
rules.custom, under `rules`; rules.external under `externalRules`.
*/}}
{{- define "gpu-pulse.adapter.rulesConfig" -}}
{{- $rules := list -}}
{{- if .Values.rules.default -}}
{{- $rules = concat $rules (include "gpu-pulse.adapter.defaultRules" . | fromYamlArray) -}}
{{- end -}}
{{- $rules = concat $rules (.Values.rules.custom | default list) -}}
{{- $config := dict -}}
{{- if $rules }}{{ $_ := set $config "rules" $rules }}{{ end -}}
{{- with .Values.rules.external }}{{ $_ := set $config "externalRules" . }}{{ end -}}
{{- toYaml $config -}}
{{- end }}

{{/*
prometheus-adapter's chart default rules (prometheus-community/helm-charts charts/prometheus-adapter
templates/configmap.yaml, under `rules.default`), as that chart writes them.
*/}}
{{- define "gpu-pulse.adapter.defaultRules" -}}
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters: []
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)_seconds_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: ^container_.*_seconds_total$
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: ^container_.*_total$
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)$
    as: ""
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>,container!="POD"}) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters:
  - isNot: .*_total$
  resources:
    template: <<.Resource>>
  name:
    matches: ""
    as: ""
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters:
  - isNot: .*_seconds_total
  resources:
    template: <<.Resource>>
  name:
    matches: ^(.*)_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters: []
  resources:
    template: <<.Resource>>
  name:
    matches: ^(.*)_seconds_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
{{- end }}

{{/* KEDA's client CA (kedaClientAuth): "" where callers are not asked for a certificate, else {"secret", "key"} as
JSON; fails where a client certificate is asked for without TLS. */}}
{{- define "gpu-pulse.keda.clientCA" -}}
{{- if and .Values.keda.externalScaler.enabled (eq .Values.kedaClientAuth.mode "certificate") -}}
{{- if not .Values.keda.externalScaler.tls -}}
{{- fail "kedaClientAuth.mode certificate needs keda.externalScaler.tls: client certificates come with TLS (set kedaClientAuth.mode: none to serve KEDA's port in plaintext, unauthenticated)" -}}
{{- end -}}
{{- with .Values.kedaClientAuth.clientCA -}}
{{- if .secretName -}}
{{- toJson (dict "secret" .secretName "key" .key) -}}
{{- else -}}
{{- toJson (dict "secret" (include "gpu-pulse.keda.clientSecret" $) "key" "ca.crt") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The Secret of KEDA's client certificate the chart makes (kedaClientAuth without clientCA.secretName). */}}
{{- define "gpu-pulse.keda.clientSecret" -}}
{{- printf "%s-keda-client" (include "gpu-pulse.fullname" .) -}}
{{- end }}
