package duck

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// lastApplied is kubectl's copy of the whole object as last applied: often the largest field of a
// workload, and of no use to a controller that reads the live object.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimmedWorkloads is the cache configuration (cache.Options.ByObject entries) for the built-in
// workload kinds of a controller that watches them and resolves its targets from its cache
// (NewManagerResolver) but reads little of them: every workload is kept trimmed by TrimWorkload.
// The cache holds every workload of the cluster; this keeps a fraction of each.
func TrimmedWorkloads(slim func(corev1.PodTemplateSpec) corev1.PodTemplateSpec) map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{}
	for _, gvk := range BuiltinKinds() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		by[u] = cache.ByObject{Transform: TrimWorkload(slim)}
	}
	return by
}

// TrimWorkload returns a cache transform that keeps of a workload its metadata (without
// managedFields and kubectl's last-applied copy), spec.selector, and its pod template as slim
// returns it: a Workload view of the result resolves, selects pods and reads the template like the
// original, as far as slim kept it. Objects that are not workloads pass through unchanged.
func TrimWorkload(slim func(corev1.PodTemplateSpec) corev1.PodTemplateSpec) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		w, err := NewWorkload(u)
		if err != nil {
			return obj, nil
		}
		tmpl, err := w.PodTemplate()
		if err != nil {
			return obj, nil
		}
		trimmed := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": u.GetAPIVersion(),
			"kind":       u.GetKind(),
			"metadata":   u.Object["metadata"], // u is fresh from the decoder and discarded: shared
		}}
		trimmed.SetManagedFields(nil)
		if a := trimmed.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			trimmed.SetAnnotations(a)
		}
		spec := map[string]any{}
		if sel, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "selector"); found {
			spec["selector"] = sel
		}
		trimmed.Object["spec"] = spec
		if err := unstructured.SetNestedMap(trimmed.Object, map[string]any{}, w.kind.templatePath...); err != nil {
			return obj, nil
		}
		tw := &Workload{obj: trimmed, kind: w.kind}
		if err := tw.SetPodTemplate(ptrTo(slim(*tmpl))); err != nil {
			return obj, nil
		}
		return trimmed, nil
	}
}

func ptrTo[T any](v T) *T { return &v }
