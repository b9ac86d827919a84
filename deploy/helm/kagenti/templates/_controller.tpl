{{/*
Shared building blocks for the pillar subcharts (Helm shares named templates between a chart and
its subcharts). Each takes a dict: root (the subchart's context), name (kagenti-<pillar>) and, for
the Deployment, args (list), ports (list of {name, containerPort}), and optional volumes/volumeMounts,
serviceAccount (default: name) and image ({repository, tag}; when absent, the subchart's image
value), which a second Deployment of a pillar, with a binary of its own, sets.
*/}}

{{- define "kagenti.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: kagenti
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- with .root.Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kagenti.image" -}}
{{- $img := .image | default dict -}}
{{ $img.repository | default (printf "%s/%s" .root.Values.global.image.registry .name) }}:{{ $img.tag | default .root.Values.global.image.tag }}
{{- end -}}

{{- define "kagenti.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kagenti.labels" . | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "kagenti.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}
subjects:
- kind: ServiceAccount
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{/*
Leader election: the controller's Lease lives in the release namespace, so the right to write Leases
is a Role there, never cluster-wide.
*/}}
{{- define "kagenti.leaderElectionRBAC" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-leader-election
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kagenti.labels" . | nindent 4 }}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-leader-election
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kagenti.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-leader-election
subjects:
- kind: ServiceAccount
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{- define "kagenti.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kagenti.labels" . | nindent 4 }}
spec:
  replicas: {{ .root.Values.replicas | default 1 }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
  template:
    metadata:
      labels:
        {{- include "kagenti.labels" . | nindent 8 }}
    spec:
      serviceAccountName: {{ .serviceAccount | default .name }}
      securityContext:
        runAsNonRoot: true
        seccompProfile:
          type: RuntimeDefault
      containers:
      - name: manager
        image: {{ include "kagenti.image" (dict "root" .root "name" .name "image" (ternary .image .root.Values.image (hasKey . "image"))) }}
        imagePullPolicy: {{ .root.Values.global.image.pullPolicy }}
        args:
        {{- toYaml .args | nindent 8 }}
        {{- with .root.Values.env }}
        env:
        {{- toYaml . | nindent 8 }}
        {{- end }}
        ports:
        - name: metrics
          containerPort: 8443
        - name: health
          containerPort: 8081
        {{- with .ports }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        livenessProbe:
          httpGet: {path: /healthz, port: health}
        readinessProbe:
          httpGet: {path: /readyz, port: health}
        resources:
          {{- toYaml (.root.Values.resources | default (dict "requests" (dict "cpu" "50m" "memory" "64Mi") "limits" (dict "memory" "256Mi"))) | nindent 10 }}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities:
            drop: [ALL]
        {{- with .volumeMounts }}
        volumeMounts:
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .volumes }}
      volumes:
      {{- toYaml . | nindent 6 }}
      {{- end }}
{{- end -}}

{{- define "kagenti.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}-metrics
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kagenti.labels" . | nindent 4 }}
spec:
  selector:
    app.kubernetes.io/name: {{ .name }}
  ports:
  # HTTPS behind the API server's authentication and authorization (docs/security.md).
  - name: https
    port: 8443
    targetPort: metrics
{{- end -}}
