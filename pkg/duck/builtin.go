package duck

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewBuiltinObject returns an empty typed object of the built-in workload kind gvk (e.g.
// *appsv1.Deployment), or nil for any other kind. A controller watches the built-in kinds through
// these objects: its cache then holds them typed and trimmed (pkg/duck/kit.TrimmedWorkloads), and
// NewManagerResolver reads the same informers. Watching them as unstructured objects instead would
// start a second informer per kind, each holding every workload of the cluster again.
func NewBuiltinObject(gvk schema.GroupVersionKind) client.Object {
	if !isBuiltin(gvk) {
		return nil
	}
	switch gvk.Kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	case "ReplicaSet":
		return &appsv1.ReplicaSet{}
	case "Job":
		return &batchv1.Job{}
	case "CronJob":
		return &batchv1.CronJob{}
	}
	return nil
}
