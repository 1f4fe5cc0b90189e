{{/*
The leasekeeper sidecar container: in containers, or with sidecar.native in
initContainers with restartPolicy Always (Kubernetes 1.29+); otherwise the same.
*/}}
{{- define "leasekeeper.sidecarContainer" -}}
{{- $secretVolumes := include "leasekeeper.secretVolumes" . | fromJsonArray -}}
- name: leasekeeper
  image: {{ include "leasekeeper.image" . | quote }}
  imagePullPolicy: {{ .Values.sidecar.image.pullPolicy }}
  {{- if .Values.sidecar.native }}
  # A Kubernetes native sidecar (1.29+): an init container that keeps running next to
  # the app, started before it and stopped after it.
  restartPolicy: Always
  {{- end }}
  ports:
    - name: http
      containerPort: {{ .Values.sidecar.port }}
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
    {{- include "leasekeeper.env" . | nindent 4 }}
    {{- with .Values.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  readinessProbe:
    {{- toYaml .Values.sidecar.readinessProbe | nindent 4 }}
  livenessProbe:
    {{- toYaml .Values.sidecar.livenessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    {{- range $secretVolumes }}
    - name: {{ .name }}
      mountPath: {{ .mountPath }}
      readOnly: true
    {{- end }}
    {{- with .Values.sidecar.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
