{{/*
The sidecar's named templates, for this chart's own Deployment, for the injector's
sidecar template and for other charts' pod specs (a chart that lists leasekeeper as a
dependency). Each takes either

  - this chart's context: include "leasekeeper.sidecarContainer" .
  - a parent chart's context and the leasekeeper values to use:
      include "leasekeeper.sidecarContainer" (dict "ctx" $ "values" .Values.leasekeeper)
    ("values" defaults to .Values.leasekeeper of "ctx"; "chart" names the dependency
    when it is aliased, default "leasekeeper"; its appVersion is the image tag's default).

  leasekeeper.sidecarContainer   the sidecar container, as one list item; with
                                 sidecar.native it carries restartPolicy: Always and goes
                                 in initContainers, else in containers
  leasekeeper.sidecarVolumes     the volumes it mounts (tmp, backend Secrets), list items
  leasekeeper.podLabels          the Pod labels it expects (leasekeeper.io/election)
  leasekeeper.serviceAccountName the ServiceAccount the chart's Role is bound to
*/}}

{{/*
Fills .out with Values, Chart, Release and Capabilities from .in, which is this chart's
context or (dict "ctx" PARENT "values" VALUES ["chart" NAME]).
*/}}
{{- define "leasekeeper.resolve" -}}
{{- $in := .in }}
{{- if hasKey $in "ctx" }}
{{- $ctx := $in.ctx }}
{{- $chart := $in.chart | default "leasekeeper" }}
{{- $values := $in.values | default (index $ctx.Values $chart) }}
{{- if not $values }}
{{- fail (printf "leasekeeper: no values for the sidecar: pass (dict \"ctx\" $ \"values\" .Values.%s), with %s listed in the chart's dependencies" $chart $chart) }}
{{- end }}
{{- $meta := dict "Name" "leasekeeper" "AppVersion" "" }}
{{- if and $ctx.Subcharts (hasKey $ctx.Subcharts $chart) }}
{{- $sub := (index $ctx.Subcharts $chart).Chart }}
{{- $meta = dict "Name" $sub.Name "AppVersion" $sub.AppVersion }}
{{- else if eq $ctx.Chart.Name $chart }}
{{- $meta = dict "Name" $ctx.Chart.Name "AppVersion" $ctx.Chart.AppVersion }}
{{- end }}
{{- if not (or $meta.AppVersion $values.sidecar.image.tag) }}
{{- fail (printf "leasekeeper: chart %q is not a dependency of %s, so the image tag has no default: set sidecar.image.tag" $chart $ctx.Chart.Name) }}
{{- end }}
{{- $_ := set .out "Values" $values }}
{{- $_ = set .out "Chart" $meta }}
{{- $_ = set .out "Release" $ctx.Release }}
{{- $_ = set .out "Capabilities" $ctx.Capabilities }}
{{- else }}
{{- $_ := set .out "Values" $in.Values }}
{{- $_ = set .out "Chart" $in.Chart }}
{{- $_ = set .out "Release" $in.Release }}
{{- $_ = set .out "Capabilities" $in.Capabilities }}
{{- end }}
{{- end }}

{{/*
The leasekeeper sidecar container: in containers, or with sidecar.native in
initContainers with restartPolicy Always (Kubernetes 1.29+); otherwise the same.
*/}}
{{- define "leasekeeper.sidecarContainer" -}}
{{- $c := dict }}
{{- include "leasekeeper.resolve" (dict "in" . "out" $c) }}
{{- $v := $c.Values }}
{{- $secretVolumes := include "leasekeeper.secretVolumes" $c | fromJsonArray -}}
- name: leasekeeper
  image: {{ include "leasekeeper.image" $c | quote }}
  imagePullPolicy: {{ $v.sidecar.image.pullPolicy }}
  {{- if $v.sidecar.native }}
  # A Kubernetes native sidecar (1.29+): an init container that keeps running next to
  # the app, started before it and stopped after it.
  restartPolicy: Always
  {{- end }}
  ports:
    - name: http
      containerPort: {{ $v.sidecar.port }}
      protocol: TCP
  env:
    # The candidate's identity and the namespace of its Pod and Lease.
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- include "leasekeeper.env" $c | nindent 4 }}
    {{- with $v.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  readinessProbe:
    {{- toYaml $v.sidecar.readinessProbe | nindent 4 }}
  livenessProbe:
    {{- toYaml $v.sidecar.livenessProbe | nindent 4 }}
  resources:
    {{- toYaml $v.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    {{- range $secretVolumes }}
    - name: {{ .name }}
      mountPath: {{ .mountPath }}
      readOnly: true
    {{- end }}
    {{- with $v.sidecar.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
The volumes the sidecar mounts: an emptyDir on /tmp and the backend's Secrets. Not
sidecar.extraVolumeMounts' volumes: those are the pod spec's to define.
*/}}
{{- define "leasekeeper.sidecarVolumes" -}}
{{- $c := dict }}
{{- include "leasekeeper.resolve" (dict "in" . "out" $c) }}
{{- $secretVolumes := include "leasekeeper.secretVolumes" $c | fromJsonArray -}}
- name: tmp
  emptyDir:
    sizeLimit: 16Mi
{{- range $secretVolumes }}
- name: {{ .name }}
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0440
    items:
      {{- toYaml .items | nindent 6 }}
{{- end }}
{{- end }}

{{/*
The labels a Pod with the sidecar carries: its election (with podLabel.enabled), by which
a new leader finds and clears stale leader labels of its own election. Empty otherwise.
*/}}
{{- define "leasekeeper.podLabels" -}}
{{- $c := dict }}
{{- include "leasekeeper.resolve" (dict "in" . "out" $c) }}
{{- if $c.Values.podLabel.enabled -}}
leasekeeper.io/election: {{ include "leasekeeper.election" $c | quote }}
{{- end }}
{{- end }}

{{/*
The rules of the Role a sidecar needs (list items; use it only when
leasekeeper.needsApi): the chart's own Role and the Roles of injector.sidecarRBAC are
the same. Called with a context that has .Values.
*/}}
{{- define "leasekeeper.sidecarRules" -}}
{{- if .Values.podLabel.enabled }}
# The leader label on its own Pod: read it, merge-patch it, and watch it to correct drift;
# a new leader lists the Pods of its election to clear stale leader labels.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "patch", "watch"]
{{- end }}
{{- if eq .Values.backend.type "kubernetes" }}
# The Lease backend: read, create and renew (update) the Lease; followers watch it, and so
# does the leader; list (of the one Lease) reads the API's current resourceVersion, from
# which a created Lease takes its first fencing token.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "create", "update", "watch"]
{{- end }}
{{- if and (eq .Values.backend.type "kubernetes") .Values.leaseCandidate.enabled }}
# --lease-candidate: create and renew (update) the own LeaseCandidate, watch it for the
# coordinator's pings, list (the own one; the election's live ones, for a switchover),
# and delete it on a graceful shutdown (the coordinator would wait 5 s for it).
- apiGroups: ["coordination.k8s.io"]
  resources: ["leasecandidates"]
  verbs: ["list", "watch", "create", "update", "delete"]
{{- end }}
{{- if .Values.events.enabled }}
# Leadership Events ("<pod> became leader", "stopped leading"), about the Lease or the
# own Pod: create one, patch its count when it repeats.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
{{- end }}
