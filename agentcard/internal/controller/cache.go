package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"
)

// CacheOptions is what the manager caches for agentcard, watching namespaces (all when empty):
// every object without managedFields (server-side apply does not need them here), pods trimmed to
// what a sync and the LabelGuard read (TrimPod), and the built-in workloads to their metadata,
// selector and pod template labels (all that target resolution and auto-creation read). main and
// the envtest suite use it, so the tests run the controller on the caches the binary has.
func CacheOptions(namespaces map[string]cache.Config) cache.Options {
	by := duck.TrimmedWorkloads(templateLabelsOnly)
	by[&corev1.Pod{}] = cache.ByObject{Transform: TrimPod}
	return cache.Options{
		DefaultNamespaces: namespaces,
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject:          by,
	}
}

// ClientOptions make unstructured reads (the workloads, through pkg/duck) come from the cache.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: true}}
}

// templateLabelsOnly is the part of a workload's pod template agentcard reads (a CronJob's pods
// are selected by its template labels).
func templateLabelsOnly(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: t.Labels}}
}

// TrimPod is the cache transform for pods: it keeps the metadata without managedFields and
// annotations (names, UID, labels, timestamps), the service account (expected SPIFFE identity),
// the containers' ports (endpointFor), and of the status the phase, the IP and the Ready condition
// (isServing). Other objects pass through unchanged.
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	slim.ManagedFields, slim.Annotations = nil, nil
	slim.Spec.ServiceAccountName = p.Spec.ServiceAccountName
	for _, c := range p.Spec.Containers {
		if len(c.Ports) == 0 {
			continue
		}
		ports := make([]corev1.ContainerPort, 0, len(c.Ports))
		for _, cp := range c.Ports {
			ports = append(ports, corev1.ContainerPort{Name: cp.Name, ContainerPort: cp.ContainerPort})
		}
		slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name, Ports: ports})
	}
	slim.Status.Phase, slim.Status.PodIP = p.Status.Phase, p.Status.PodIP
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}
