package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
)

// CacheByObject restricts what the manager caches for this controller: only its own ConfigMaps
// (not every ConfigMap in the cluster), as metadata and a hash of their content
// (configmap.DigestTransform), and trimmed views of pods and of the built-in workloads.
func CacheByObject() map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{configmap.ManagedByLabel: Name}), Transform: configmap.DigestTransform},
		&corev1.Pod{}:       {Transform: TrimPod},
	}
	for _, gvk := range duck.BuiltinKinds() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		by[u] = cache.ByObject{Transform: TrimWorkload}
	}
	return by
}

// lastApplied is kubectl's copy of the whole object as last applied: often the largest field of a
// workload, and never read here.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimWorkload is the cache transform for the built-in workload kinds, which the controller
// watches and resolves its targets from: it keeps the metadata (without managedFields and kubectl's
// last-applied copy), spec.selector, and of the pod template only its metadata and service
// account — all the reconciler reads. A Deployment with a real pod spec shrinks several times, and
// the cache holds every workload of the cluster.
func TrimWorkload(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	w, err := duck.NewWorkload(u)
	if err != nil {
		return obj, nil // not a workload shape: keep it as it is
	}
	path := w.TemplatePath()
	trimmed := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
		"metadata":   u.Object["metadata"],
	}}
	trimmed.SetManagedFields(nil)
	if a := trimmed.GetAnnotations(); a[lastApplied] != "" {
		delete(a, lastApplied)
		trimmed.SetAnnotations(a)
	}
	if sel, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "selector"); found {
		_ = unstructured.SetNestedField(trimmed.Object, sel, "spec", "selector")
	}
	if md, found, _ := unstructured.NestedFieldNoCopy(u.Object, append(path, "metadata")...); found {
		_ = unstructured.SetNestedField(trimmed.Object, md, append(path, "metadata")...)
	} else {
		_ = unstructured.SetNestedMap(trimmed.Object, map[string]any{}, append(path, "metadata")...)
	}
	if sa, found, _ := unstructured.NestedString(u.Object, append(path, "spec", "serviceAccountName")...); found {
		_ = unstructured.SetNestedField(trimmed.Object, sa, append(path, "spec", "serviceAccountName")...)
	}
	return trimmed, nil
}
