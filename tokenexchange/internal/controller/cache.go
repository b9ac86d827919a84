package controller

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck/kit"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

// CacheByObject restricts what the manager caches for this controller: only its own ConfigMaps
// (not every ConfigMap in the cluster), as metadata and a hash of their content
// (kit.DigestTransform), and trimmed views of the built-in workloads. Pods are not in it:
// they are kept as cachedPods in an informer of their own (kit.SlimPods, Setup).
func CacheByObject() map[client.Object]cache.ByObject {
	by := kit.TrimmedWorkloads(slimTemplate)
	by[&corev1.ConfigMap{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{contract.ManagedByLabel: Name}), Transform: compactConfigMap}
	by[&v1alpha1.TokenExchange{}] = cache.ByObject{Transform: kit.CompactObject}
	return by
}

// configMapLabels are the labels of every ConfigMap this controller writes (resources.MakeConfigMap's
// and the applier's managed-by). The cache never hands out its objects (its readers get deep
// copies), so it holds this one map for every ConfigMap that carries exactly these labels.
var configMapLabels = map[string]string{contract.PartOfLabel: contract.PartOf, contract.ComponentLabel: resources.Component, contract.ManagedByLabel: Name}

// compactConfigMap is kit.DigestTransform (metadata and a hash of the content), with the
// labels shared when they are configMapLabels: a map of three labels and their strings cost
// ≈ 450 bytes a ConfigMap.
func compactConfigMap(obj any) (any, error) {
	obj, err := kit.DigestTransform(obj)
	if cm, ok := obj.(*corev1.ConfigMap); ok && maps.Equal(cm.Labels, configMapLabels) {
		cm.Labels = configMapLabels
	}
	return obj, err
}

// slimTemplate keeps of a workload's pod template what the reconciler reads: the labels, whether
// the injection-status annotation is set (not its value: kit.TemplateMetaPresence), and the
// service account.
func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: kit.TemplateMetaPresence(t.ObjectMeta, contract.InjectionStatusAnnotation),
		Spec: corev1.PodSpec{ServiceAccountName: t.Spec.ServiceAccountName}}
}
