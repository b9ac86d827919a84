package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kagenti/platform/pkg/duck"
)

// stripPod keeps what configuredPods reads (labels, phase, volumes, mounts), which keeps the pod
// cache small on large clusters.
func stripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{ObjectMeta: pod.ObjectMeta, Spec: slimPodSpec(&pod.Spec)}
	slim.ManagedFields, slim.Annotations = nil, nil
	slim.Status.Phase = pod.Status.Phase
	return slim, nil
}

// slimPodSpec keeps what mountsConfigMap reads: ConfigMap volumes and the containers' mounts.
func slimPodSpec(spec *corev1.PodSpec) corev1.PodSpec {
	var out corev1.PodSpec
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			out.Volumes = append(out.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: v.ConfigMap.LocalObjectReference}}})
		}
	}
	slim := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, 0, len(cs))
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.Name, VolumeMounts: c.VolumeMounts})
		}
		return out
	}
	out.Containers = slim(spec.Containers)
	out.InitContainers = slim(spec.InitContainers)
	return out
}

// lastApplied is kubectl's copy of the whole object as last applied: often the largest field of a
// workload, and never read here.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// trimWorkload is the cache transform for the built-in workload kinds, which the controller watches
// and resolves its targets from: it keeps the metadata (without managedFields and kubectl's
// last-applied copy), spec.selector, and of the pod template its metadata and what mountsConfigMap
// reads. The cache holds every workload of the cluster; this is a fraction of a real one.
func trimWorkload(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	w, err := duck.NewWorkload(u)
	if err != nil {
		return obj, nil // not a workload shape: keep it as it is
	}
	tmpl, err := w.PodTemplate()
	if err != nil {
		return obj, nil
	}
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
	if err := unstructured.SetNestedMap(trimmed.Object, map[string]any{}, w.TemplatePath()...); err != nil {
		return obj, nil
	}
	tw, err := duck.NewWorkload(trimmed)
	if err != nil {
		return obj, nil
	}
	if err := tw.SetPodTemplate(&corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: slimPodSpec(&tmpl.Spec)}); err != nil {
		return obj, nil
	}
	return trimmed, nil
}
