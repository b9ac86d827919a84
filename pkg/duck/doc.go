// Package duck resolves workload references (spec.targetRef) to a uniform view of any PodSpecable
// workload: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob and any custom kind that
// carries a pod template in spec.template (Knative's duckv1.WithPod shape).
//
// One code path serves every kind: workloads are read as unstructured objects and only the few
// facts that differ per kind (where the pod template lives, how readiness is reported) are looked up
// in a small table. Unknown shapes are reported as UnsupportedKind, never guessed. A controller's
// cache holds the built-in kinds typed and trimmed (TrimmedWorkloads: a typed object costs less
// than the same fields as nested maps); NewManagerResolver views them as unstructured per read.
// Pods, the most numerous objects a controller watches, are kept outside the manager's cache as a
// small type of the controller's own (SlimPods: informer, namespaced index, controller source);
// TemplateMetaPresence and Status.Compact trim what the cache keeps of templates and conditions.
package duck
