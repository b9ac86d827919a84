// Package builder holds the RBAC markers of ClusterRole kagenti-agentbuild-builder: what the
// agentbuild controller does inside a namespace where it builds. hack/generate.sh generates it apart
// from ClusterRole kagenti-agentbuild (what the controller needs cluster-wide: watching AgentBuilds,
// PipelineRuns and workload metadata, writing AgentBuild status and Events), because it is bound per
// namespace: a RoleBinding in each build namespace, or a ClusterRoleBinding where the platform
// engineer chooses cluster-wide builds (docs/security.md). Creating PipelineRuns runs pods with any
// ServiceAccount of the namespace and deployTo patches workloads, so these rights are never granted
// cluster-wide by default.
package builder

// Render the build: the Pipeline and PipelineRun of each generation (owned by the AgentBuild),
// cancel and prune old runs. Templates and steps come from the controller's watch of labelled
// ConfigMaps (ClusterRole kagenti-agentbuild).
// +kubebuilder:rbac:groups=tekton.dev,resources=pipelines,verbs=get;create;delete
// +kubebuilder:rbac:groups=tekton.dev,resources=pipelineruns,verbs=get;create;patch;delete

// Clean up the source workspace of a finished run.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=list;delete

// deployTo: read the target workload and patch the built image into its container.
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;patch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;patch
