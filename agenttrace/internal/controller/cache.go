package controller

import corev1 "k8s.io/api/core/v1"

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

// slimTemplate keeps of a workload's pod template what templateWired reads: its metadata (the
// injection-status annotation, the labels), the ConfigMap volumes and the containers' mounts.
func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta, Spec: slimPodSpec(&t.Spec)}
}
