package controller

import (
	"unique"

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

// TrimPod is the cache transform for pods: it keeps what a sync, the pod watch's predicate and
// the LabelGuard read, and nothing else, as a fresh object that shares nothing with the decoded
// one (which is then garbage). Of the metadata: name, namespace, UID, resourceVersion (the
// guard's optimistic lock), the creation and deletion timestamps and the labels; of the spec: the
// service account (expected SPIFFE identity) and the one container port endpointFor would pick
// (cardPort), in a container of its own; of the status: the phase, the IP and the Ready condition
// (isServing). Strings every pod repeats (namespace, label keys and values, service account) are
// interned: thousands of pods hold one copy. Other objects pass through unchanged.
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: intern(p.Namespace), UID: p.UID, ResourceVersion: p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp, Labels: internLabels(p.Labels),
	}}
	slim.Spec.ServiceAccountName = intern(p.Spec.ServiceAccountName)
	if cp, ok := cardPort(p); ok {
		slim.Spec.Containers = []corev1.Container{{Ports: []corev1.ContainerPort{{Name: intern(cp.Name), ContainerPort: cp.ContainerPort}}}}
	}
	slim.Status.Phase, slim.Status.PodIP = corev1.PodPhase(intern(string(p.Status.Phase))), p.Status.PodIP
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionStatus(intern(string(c.Status)))}}
		}
	}
	return slim, nil
}

// intern returns the canonical copy of s: equal strings of many cached objects share one.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// internLabels copies labels with interned keys and values.
func internLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[intern(k)] = intern(v)
	}
	return out
}
