package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
)

// CacheByObject restricts what the manager caches for this controller: only its own ConfigMaps
// (not every ConfigMap in the cluster), as metadata and a hash of their content
// (configmap.DigestTransform), and trimmed views of the built-in workloads. Pods are not in it:
// they are kept as cachedPods in an informer of their own (duck.SlimPods, Setup).
func CacheByObject() map[client.Object]cache.ByObject {
	by := duck.TrimmedWorkloads(slimTemplate)
	by[&corev1.ConfigMap{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{configmap.ManagedByLabel: Name}), Transform: configmap.DigestTransform}
	return by
}

// slimTemplate keeps of a workload's pod template what the reconciler reads: its metadata (the
// injection-status annotation, the labels) and the service account.
func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta, Spec: corev1.PodSpec{ServiceAccountName: t.Spec.ServiceAccountName}}
}
