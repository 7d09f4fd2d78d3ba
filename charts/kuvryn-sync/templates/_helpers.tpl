{{/* Chart name, overridable. */}}
{{- define "kuvryn-sync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every object name. Kept to 40 characters so "<fullname>-controller-metrics" and
friends stay within 63.
*/}}
{{- define "kuvryn-sync.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kuvryn-sync.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "kuvryn-sync.labels" -}}
helm.sh/chart: {{ include "kuvryn-sync.chart" . }}
app.kubernetes.io/name: {{ include "kuvryn-sync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kuvryn-sync
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "controller"). */}}
{{- define "kuvryn-sync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kuvryn-sync.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of one component's objects. */}}
{{- define "kuvryn-sync.componentLabels" -}}
{{ include "kuvryn-sync.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kuvryn-sync.controller.name" -}}
{{- printf "%s-controller" (include "kuvryn-sync.fullname" .) -}}
{{- end -}}

{{- define "kuvryn-sync.webhook.name" -}}
{{- printf "%s-webhook" (include "kuvryn-sync.fullname" .) -}}
{{- end -}}

{{/* The receivers' Service (the admission Service is kuvryn-sync.webhook.name). */}}
{{- define "kuvryn-sync.webhook.receiversName" -}}
{{- printf "%s-webhook-receivers" (include "kuvryn-sync.fullname" .) -}}
{{- end -}}

{{- define "kuvryn-sync.controller.serviceAccountName" -}}
{{- default (include "kuvryn-sync.controller.name" .) .Values.controller.serviceAccount.name -}}
{{- end -}}

{{- define "kuvryn-sync.webhook.serviceAccountName" -}}
{{- default (include "kuvryn-sync.webhook.name" .) .Values.webhook.serviceAccount.name -}}
{{- end -}}

{{/* image reference REPOSITORY:TAG, or REPOSITORY:TAG@DIGEST with a digest (the digest is
what the runtime pulls; the tag stays for people reading it); call with
(dict "root" $ "image" .Values.controller.image). */}}
{{- define "kuvryn-sync.image" -}}
{{- $ref := printf "%s:%s" (required "image.repository is required" .image.repository) (default .root.Chart.AppVersion .image.tag) -}}
{{- with .image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "image.digest must be sha256:<64 hex digits> (got %q)" .) -}}
{{- end -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* A Deployment's extra environment (its component's extraEnv). The log level is a flag
(--log-level from controller.logLevel / webhook.logLevel), not RUST_LOG: RUST_LOG would win over
it. Call with (dict "root" $ "extraEnv" LIST). */}}
{{- define "kuvryn-sync.commonEnv" -}}
{{- with .extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The certificate mode, checked. */}}
{{- define "kuvryn-sync.certMode" -}}
{{- $mode := .Values.webhook.certificates.mode -}}
{{- if not (has $mode (list "generated" "provided" "cert-manager")) -}}
{{- fail (printf "webhook.certificates.mode must be one of generated, provided, cert-manager (got %q)" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* DNS names of the webhook's two Services (admission first), which the serving certificate
must carry. */}}
{{- define "kuvryn-sync.webhook.dnsNames" -}}
{{- $svc := include "kuvryn-sync.webhook.name" . -}}
{{- $rcv := include "kuvryn-sync.webhook.receiversName" . -}}
{{- $ns := .Release.Namespace -}}
{{- list (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) (printf "%s.%s.svc" $rcv $ns) (printf "%s.%s.svc.cluster.local" $rcv $ns) | toJson -}}
{{- end -}}

{{/* The Secret holding tls.crt / tls.key for the webhook. */}}
{{- define "kuvryn-sync.webhook.tlsSecretName" -}}
{{- if eq (include "kuvryn-sync.certMode" .) "provided" -}}
{{- required "webhook.certificates.existingSecret is required when webhook.certificates.mode=provided: name a kubernetes.io/tls Secret (tls.crt, tls.key) in the release namespace" .Values.webhook.certificates.existingSecret -}}
{{- else -}}
{{- printf "%s-tls" (include "kuvryn-sync.webhook.name" .) -}}
{{- end -}}
{{- end -}}

{{/* The cert-manager serving Certificate (its CA is injected into the webhook configurations). */}}
{{- define "kuvryn-sync.webhook.certificateName" -}}
{{- include "kuvryn-sync.webhook.name" . -}}
{{- end -}}

{{/* Pod-level hardening shared by both Deployments (values podSecurityContext). */}}
{{- define "kuvryn-sync.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{/* Container-level hardening shared by both Deployments (values securityContext). */}}
{{- define "kuvryn-sync.containerSecurityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* Liveness and readiness probes on the metrics port. */}}
{{- define "kuvryn-sync.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  initialDelaySeconds: 5
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/*
The admission paths the webhook serves, as a JSON list. It mirrors the webhook's route table
(webhook/src/routes.rs, `admission_paths`), and a chart test fails when the two differ: a
fail-closed webhook configuration for an unserved path would block every write to its kind.
*/}}
{{- define "kuvryn-sync.webhook.servedAdmissionPaths" -}}
["/validate/healthchecks", "/admit/applications"]
{{- end }}
