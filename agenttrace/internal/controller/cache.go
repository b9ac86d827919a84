package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
)

// stripAgentTrace drops what the controller never reads of an AgentTrace: managedFields and
// kubectl's last-applied copy of the whole object (client-side apply, Argo CD's default), which
// would double the cached spec. The status is written by server-side apply of the status alone.
func stripAgentTrace(obj any) (any, error) {
	if at, ok := obj.(*v1alpha1.AgentTrace); ok {
		// Fresh from the watch decoder and not shared yet: changed in place.
		at.ManagedFields = nil
		delete(at.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	return obj, nil
}

// stripPod keeps what configuredPods and the pod index read (labels, deletion, phase, volumes,
// mounts), which keeps the pod cache small on large clusters: of the metadata only what identifies
// the pod (no uid, owner references, annotations, managedFields, finalizers: nothing reads them).
func stripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp},
		Spec: slimPodSpec(&pod.Spec),
	}
	slim.Status.Phase = pod.Status.Phase
	return slim, nil
}

// slimPodSpec keeps what mountsConfigMap reads: ConfigMap volumes and the containers that mount
// one, with those mounts only (a container costs about 400 bytes even with only its name set, and
// an injected pod has several that mount no ConfigMap).
func slimPodSpec(spec *corev1.PodSpec) corev1.PodSpec {
	var out corev1.PodSpec
	configMapVolumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			configMapVolumes[v.Name] = true
			out.Volumes = append(out.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: v.ConfigMap.LocalObjectReference}}})
		}
	}
	slim := func(cs []corev1.Container) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			var mounts []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if configMapVolumes[m.Name] {
					mounts = append(mounts, corev1.VolumeMount{Name: m.Name})
				}
			}
			if mounts != nil {
				out = append(out, corev1.Container{Name: c.Name, VolumeMounts: mounts})
			}
		}
		return out
	}
	out.Containers = slim(spec.Containers)
	out.InitContainers = slim(spec.InitContainers)
	return out
}

// slimTemplate keeps of a workload's pod template what templateWired reads: its metadata (the
// injection-status annotation, the labels), the ConfigMap volumes and the containers' mounts.
func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta, Spec: slimPodSpec(&t.Spec)}
}
