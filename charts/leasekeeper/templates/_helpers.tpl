{{/*
Chart name, truncated to the 63 characters of a label value.
*/}}
{{- define "leasekeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the objects: the release name, with the chart name unless the release name
already contains it.
*/}}
{{- define "leasekeeper.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "leasekeeper.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object. Call with a dict: (dict "ctx" $ "component" "leader-election").
*/}}
{{- define "leasekeeper.labels" -}}
{{- $ctx := .ctx -}}
helm.sh/chart: {{ include "leasekeeper.chart" $ctx }}
{{ include "leasekeeper.selectorLabels" $ctx }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component | default "leader-election" }}
app.kubernetes.io/part-of: {{ $ctx.Values.partOf | default (include "leasekeeper.name" $ctx) }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
{{- end }}

{{/*
Labels that select the Pods of the Deployment (all candidates, leader or not).
*/}}
{{- define "leasekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels that pick out the `helm test` Pod: not the Deployment's selector labels (its
ReplicaSet would adopt the Pod), and what the NetworkPolicy admits it by.
*/}}
{{- define "leasekeeper.testSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-test" (include "leasekeeper.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the chart's Role is bound to. Takes this chart's context or a parent's
(dict "ctx" $ "values" .Values.leasekeeper), as the named templates of _sidecar.tpl.
*/}}
{{- define "leasekeeper.serviceAccountName" -}}
{{- $c := dict }}
{{- include "leasekeeper.resolve" (dict "in" . "out" $c) }}
{{- if $c.Values.serviceAccount.create }}
{{- default (include "leasekeeper.fullname" $c) $c.Values.serviceAccount.name }}
{{- else }}
{{- default "default" $c.Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "leasekeeper.image" -}}
{{- printf "%s:%s" .Values.sidecar.image.repository (.Values.sidecar.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The election's name (the Lease's, with the kubernetes backend).
*/}}
{{- define "leasekeeper.election" -}}
{{- .Values.election.name | default (include "leasekeeper.fullname" .) }}
{{- end }}

{{/*
Whether the helm test Pod renders: it asks the leader Service's status port, so that
Service must exist, select the leader label, and carry the port.
*/}}
{{- define "leasekeeper.testEnabled" -}}
{{- if and .Values.deployment.enabled .Values.tests.enabled .Values.service.enabled .Values.service.leaderOnly .Values.podLabel.enabled .Values.service.exposeStatusPort }}true{{ end }}
{{- end }}

{{/*
Whether the Pods talk to the Kubernetes API (Pod label or Lease backend): then they need
the ServiceAccount token and the Role.
*/}}
{{- define "leasekeeper.needsApi" -}}
{{- if or .Values.podLabel.enabled .Values.events.enabled (eq .Values.backend.type "kubernetes") }}true{{ end }}
{{- end }}

{{/*
Checks of combinations the schema cannot express; a failed one stops the render with a
message naming the value.
*/}}
{{- define "leasekeeper.validate" -}}
{{- $b := .Values.backend }}
{{- if and .Values.deployment.enabled .Values.service.enabled .Values.service.leaderOnly (not .Values.podLabel.enabled) }}
{{- fail "service.leaderOnly needs podLabel.enabled=true: the Service selects the leader by the label the sidecar sets" }}
{{- end }}
{{- if and .Values.podLabel.enabled (eq (toString .Values.podLabel.leaderValue) (toString .Values.podLabel.followerValue)) }}
{{- fail "podLabel.leaderValue and podLabel.followerValue must differ" }}
{{- end }}
{{- if and .Values.podLabel.enabled (gt (len (include "leasekeeper.election" .)) 63) }}
{{- fail "election.name must be at most 63 characters with podLabel.enabled: each Pod carries it as the label leasekeeper.io/election" }}
{{- end }}
{{- if and (eq $b.type "etcd") (not $b.etcd.endpoints) }}
{{- fail "backend.etcd.endpoints is required with backend.type=etcd" }}
{{- end }}
{{- if eq $b.type "redis" }}
{{- if ne (len $b.redis.urls) 1 }}
{{- fail "backend.redis.urls must hold exactly one URL with backend.type=redis (use redlock for several servers)" }}
{{- end }}
{{- end }}
{{- if and (eq $b.type "redlock") (lt (len $b.redis.urls) 3) }}
{{- fail "backend.redis.urls must hold at least 3 independent servers with backend.type=redlock" }}
{{- end }}
{{- if and (eq $b.type "zookeeper") (not $b.zookeeper.connect) }}
{{- fail "backend.zookeeper.connect is required with backend.type=zookeeper" }}
{{- end }}
{{- if and (eq $b.type "etcd") (or $b.etcd.user $b.etcd.passwordSecret.name) (not (and $b.etcd.user $b.etcd.passwordSecret.name)) }}
{{- fail "backend.etcd.user and backend.etcd.passwordSecret.name go together (both or neither)" }}
{{- end }}
{{- range $name := list "etcd" "redis" "zookeeper" "sql" }}
{{- $tls := (index $b $name).tls }}
{{- if and $tls.secretName (or $tls.certKey $tls.keyKey) (not (and $tls.certKey $tls.keyKey)) }}
{{- fail (printf "backend.%s.tls.certKey and backend.%s.tls.keyKey go together (both or neither)" $name $name) }}
{{- end }}
{{- end }}
{{- $kubeVersion := .Values.kubeVersion | default .Capabilities.KubeVersion.Version }}
{{- if and .Values.sidecar.native (not (semverCompare ">=1.29.0-0" $kubeVersion)) }}
{{- fail (printf "sidecar.native needs Kubernetes 1.29 or later (native sidecar containers), not %s: an older cluster would run the sidecar as an init container that never ends, and never start the app" $kubeVersion) }}
{{- end }}
{{- if and .Values.deployment.enabled .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set one of maxUnavailable or minAvailable (set the other to null)" }}
{{- end }}
{{- end }}

{{/*
The backend's Secret volumes: a list of (name, secretName, mountPath, items) dicts, in a
fixed order, used for both the volumes and the sidecar's volumeMounts.
*/}}
{{- define "leasekeeper.secretVolumes" -}}
{{- $b := .Values.backend }}
{{- $out := list }}
{{- if eq $b.type "etcd" }}
{{- if $b.etcd.tls.secretName }}
{{- $items := list (dict "key" $b.etcd.tls.caKey "path" "ca.crt") }}
{{- if $b.etcd.tls.certKey }}
{{- $items = append $items (dict "key" $b.etcd.tls.certKey "path" "tls.crt") }}
{{- $items = append $items (dict "key" $b.etcd.tls.keyKey "path" "tls.key") }}
{{- end }}
{{- $out = append $out (dict "name" "etcd-tls" "secretName" $b.etcd.tls.secretName "mountPath" "/etc/leasekeeper/etcd-tls" "items" $items) }}
{{- end }}
{{- if $b.etcd.passwordSecret.name }}
{{- $out = append $out (dict "name" "etcd-password" "secretName" $b.etcd.passwordSecret.name "mountPath" "/etc/leasekeeper/etcd-password" "items" (list (dict "key" $b.etcd.passwordSecret.key "path" "password"))) }}
{{- end }}
{{- end }}
{{- if or (eq $b.type "redis") (eq $b.type "redlock") }}
{{- if $b.redis.tls.secretName }}
{{- $items := list (dict "key" $b.redis.tls.caKey "path" "ca.crt") }}
{{- if $b.redis.tls.certKey }}
{{- $items = append $items (dict "key" $b.redis.tls.certKey "path" "tls.crt") }}
{{- $items = append $items (dict "key" $b.redis.tls.keyKey "path" "tls.key") }}
{{- end }}
{{- $out = append $out (dict "name" "redis-tls" "secretName" $b.redis.tls.secretName "mountPath" "/etc/leasekeeper/redis-tls" "items" $items) }}
{{- end }}
{{- if $b.redis.passwordSecret.name }}
{{- $out = append $out (dict "name" "redis-password" "secretName" $b.redis.passwordSecret.name "mountPath" "/etc/leasekeeper/redis-password" "items" (list (dict "key" $b.redis.passwordSecret.key "path" "password"))) }}
{{- end }}
{{- end }}
{{- if or (eq $b.type "postgres") (eq $b.type "mysql") }}
{{- if $b.sql.tls.secretName }}
{{- $items := list (dict "key" $b.sql.tls.caKey "path" "ca.crt") }}
{{- if $b.sql.tls.certKey }}
{{- $items = append $items (dict "key" $b.sql.tls.certKey "path" "tls.crt") }}
{{- $items = append $items (dict "key" $b.sql.tls.keyKey "path" "tls.key") }}
{{- end }}
{{- $out = append $out (dict "name" "sql-tls" "secretName" $b.sql.tls.secretName "mountPath" "/etc/leasekeeper/sql-tls" "items" $items) }}
{{- end }}
{{- if $b.sql.passwordSecret.name }}
{{- $out = append $out (dict "name" "sql-password" "secretName" $b.sql.passwordSecret.name "mountPath" "/etc/leasekeeper/sql-password" "items" (list (dict "key" $b.sql.passwordSecret.key "path" "password"))) }}
{{- end }}
{{- end }}
{{- if eq $b.type "zookeeper" }}
{{- if $b.zookeeper.tls.secretName }}
{{- $items := list (dict "key" $b.zookeeper.tls.caKey "path" "ca.crt") }}
{{- if $b.zookeeper.tls.certKey }}
{{- $items = append $items (dict "key" $b.zookeeper.tls.certKey "path" "tls.crt") }}
{{- $items = append $items (dict "key" $b.zookeeper.tls.keyKey "path" "tls.key") }}
{{- end }}
{{- $out = append $out (dict "name" "zookeeper-tls" "secretName" $b.zookeeper.tls.secretName "mountPath" "/etc/leasekeeper/zookeeper-tls" "items" $items) }}
{{- end }}
{{- if $b.zookeeper.authSecret.name }}
{{- $out = append $out (dict "name" "zookeeper-auth" "secretName" $b.zookeeper.authSecret.name "mountPath" "/etc/leasekeeper/zookeeper-auth" "items" (list (dict "key" $b.zookeeper.authSecret.key "path" "auth"))) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The sidecar's LEASEKEEPER_* environment (after POD_NAME and POD_NAMESPACE).
*/}}
{{- define "leasekeeper.env" -}}
{{- $b := .Values.backend -}}
- name: LEASEKEEPER_BACKEND
  value: {{ $b.type | quote }}
- name: LEASEKEEPER_ELECTION
  value: {{ include "leasekeeper.election" . | quote }}
- name: LEASEKEEPER_HTTP_ADDR
  value: {{ printf "0.0.0.0:%d" (int .Values.sidecar.port) | quote }}
- name: LEASEKEEPER_TTL
  value: {{ .Values.election.ttl | quote }}
{{- if gt (int (.Values.election.holders | default 1)) 1 }}
- name: LEASEKEEPER_HOLDERS
  value: {{ .Values.election.holders | quote }}
{{- end }}
{{- with .Values.election.mode }}
- name: LEASEKEEPER_MODE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.election.renewInterval }}
- name: LEASEKEEPER_RENEW_INTERVAL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.election.retryInterval }}
- name: LEASEKEEPER_RETRY_INTERVAL
  value: {{ . | quote }}
{{- end }}
- name: LEASEKEEPER_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: LEASEKEEPER_POD_LABEL
  value: {{ .Values.podLabel.enabled | toString | quote }}
- name: LEASEKEEPER_EVENTS
  value: {{ .Values.events.enabled | toString | quote }}
{{- if .Values.podLabel.enabled }}
- name: LEASEKEEPER_POD_LABEL_KEY
  value: {{ .Values.podLabel.key | quote }}
- name: LEASEKEEPER_POD_LABEL_LEADER_VALUE
  value: {{ .Values.podLabel.leaderValue | quote }}
- name: LEASEKEEPER_POD_LABEL_FOLLOWER_VALUE
  value: {{ .Values.podLabel.followerValue | quote }}
{{- end }}
{{- if .Values.election.exitOnLoss }}
- name: LEASEKEEPER_EXIT_ON_LOSS
  value: "true"
{{- end }}
{{- if .Values.election.enableReleaseEndpoint }}
- name: LEASEKEEPER_ENABLE_RELEASE_ENDPOINT
  value: "true"
{{- end }}
{{- if and (eq $b.type "kubernetes") .Values.leaseCandidate.enabled }}
- name: LEASEKEEPER_LEASE_CANDIDATE
  value: "true"
{{- end }}
{{- if eq $b.type "etcd" }}
- name: LEASEKEEPER_ETCD_ENDPOINTS
  value: {{ join "," $b.etcd.endpoints | quote }}
{{- with $b.etcd.tls.secretName }}
- name: LEASEKEEPER_ETCD_CA_FILE
  value: /etc/leasekeeper/etcd-tls/ca.crt
{{- if $b.etcd.tls.certKey }}
- name: LEASEKEEPER_ETCD_CERT_FILE
  value: /etc/leasekeeper/etcd-tls/tls.crt
- name: LEASEKEEPER_ETCD_KEY_FILE
  value: /etc/leasekeeper/etcd-tls/tls.key
{{- end }}
{{- end }}
{{- with $b.etcd.user }}
- name: LEASEKEEPER_ETCD_USER
  value: {{ . | quote }}
{{- end }}
{{- with $b.etcd.passwordSecret.name }}
- name: LEASEKEEPER_ETCD_PASSWORD_FILE
  value: /etc/leasekeeper/etcd-password/password
{{- end }}
{{- end }}
{{- if or (eq $b.type "redis") (eq $b.type "redlock") }}
- name: LEASEKEEPER_REDIS_URL
  value: {{ join "," $b.redis.urls | quote }}
{{- with $b.redis.passwordSecret.name }}
- name: LEASEKEEPER_REDIS_PASSWORD_FILE
  value: /etc/leasekeeper/redis-password/password
{{- end }}
{{- with $b.redis.tls.secretName }}
- name: LEASEKEEPER_REDIS_CA_FILE
  value: /etc/leasekeeper/redis-tls/ca.crt
{{- if $b.redis.tls.certKey }}
- name: LEASEKEEPER_REDIS_CERT_FILE
  value: /etc/leasekeeper/redis-tls/tls.crt
- name: LEASEKEEPER_REDIS_KEY_FILE
  value: /etc/leasekeeper/redis-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- if or (eq $b.type "postgres") (eq $b.type "mysql") }}
- name: {{ ternary "LEASEKEEPER_POSTGRES_URL" "LEASEKEEPER_MYSQL_URL" (eq $b.type "postgres") }}
  value: {{ $b.sql.url | quote }}
{{- with $b.sql.table }}
- name: LEASEKEEPER_SQL_TABLE
  value: {{ . | quote }}
{{- end }}
{{- with $b.sql.passwordSecret.name }}
- name: LEASEKEEPER_SQL_PASSWORD_FILE
  value: /etc/leasekeeper/sql-password/password
{{- end }}
{{- with $b.sql.tls.secretName }}
- name: LEASEKEEPER_SQL_CA_FILE
  value: /etc/leasekeeper/sql-tls/ca.crt
{{- if $b.sql.tls.certKey }}
- name: LEASEKEEPER_SQL_CERT_FILE
  value: /etc/leasekeeper/sql-tls/tls.crt
- name: LEASEKEEPER_SQL_KEY_FILE
  value: /etc/leasekeeper/sql-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- if eq $b.type "zookeeper" }}
- name: LEASEKEEPER_ZK_CONNECT
  value: {{ $b.zookeeper.connect | quote }}
{{- with $b.zookeeper.root }}
- name: LEASEKEEPER_ZK_ROOT
  value: {{ . | quote }}
{{- end }}
{{- with $b.zookeeper.authSecret.name }}
- name: LEASEKEEPER_ZK_AUTH_FILE
  value: /etc/leasekeeper/zookeeper-auth/auth
{{- end }}
{{- with $b.zookeeper.tls.secretName }}
- name: LEASEKEEPER_ZK_CA_FILE
  value: /etc/leasekeeper/zookeeper-tls/ca.crt
{{- if $b.zookeeper.tls.certKey }}
- name: LEASEKEEPER_ZK_CERT_FILE
  value: /etc/leasekeeper/zookeeper-tls/tls.crt
- name: LEASEKEEPER_ZK_KEY_FILE
  value: /etc/leasekeeper/zookeeper-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The injector's names and labels. Its Pods carry app.kubernetes.io/name <name>-injector,
not the Deployment's selector labels: the leader and metrics Services, the
PodDisruptionBudget and the NetworkPolicy select those.
*/}}
{{- define "leasekeeper.injector.fullname" -}}
{{- printf "%s-injector" (include "leasekeeper.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "leasekeeper.injector.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-injector" (include "leasekeeper.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "leasekeeper.injector.labels" -}}
helm.sh/chart: {{ include "leasekeeper.chart" . }}
{{ include "leasekeeper.injector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: injector
app.kubernetes.io/part-of: {{ .Values.partOf | default (include "leasekeeper.name" .) }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The Secret with the webhook's serving certificate (ca.crt, tls.crt, tls.key): the chart's
own or cert-manager's.
*/}}
{{- define "leasekeeper.injector.tlsSecret" -}}
{{- printf "%s-tls" (include "leasekeeper.injector.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Whether the webhook can carry matchConditions (CEL; on by default from Kubernetes 1.28).
*/}}
{{- define "leasekeeper.injector.matchConditions" -}}
{{- $kubeVersion := .Values.kubeVersion | default .Capabilities.KubeVersion.Version }}
{{- if semverCompare ">=1.28.0-0" $kubeVersion }}true{{ end }}
{{- end }}

{{/*
The sidecar template the injector reads: one container, the chart's sidecar.
*/}}
{{- define "leasekeeper.injector.sidecarTemplate" -}}
{{- include "leasekeeper.sidecarContainer" . | fromYamlArray | first | toYaml }}
{{- end }}
