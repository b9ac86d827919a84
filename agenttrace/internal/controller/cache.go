package controller

import (
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// cachedPod is what the controller reads of a pod, and all its pod informer keeps of one
// (kit.SlimPods): a corev1.Pod costs ≈ 2.4 KB in a cache even with every field but these
// dropped; this costs what its fields do. Of the metadata it keeps what identifies the pod, its
// labels (the workload's selector) and its deletion.
type cachedPod struct {
	metav1.ObjectMeta
	// configMaps are the ConfigMaps a container of the pod mounts (podConfigMaps).
	configMaps []string
	// running: the pod's phase is Running.
	running bool
}

// newCachedPod is the pod informer's transform: what configuredPods, podReferrers and the pod
// index read.
func newCachedPod(pod *corev1.Pod) *cachedPod {
	var cms []string
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil && mountsConfigMap(&pod.Spec, v.ConfigMap.Name) {
			cms = append(cms, v.ConfigMap.Name)
		}
	}
	return &cachedPod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: unique.Make(pod.Namespace).Value(), Labels: pod.Labels,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp},
		configMaps: slices.Clip(cms), // held for the pod's lifetime: no spare capacity
		running:    pod.Status.Phase == corev1.PodRunning,
	}
}

// GetObjectKind: the informer holds pods only, so no kind is carried.
func (p *cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the pod (client.Object).
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.configMaps = slices.Clone(p.configMaps)
	return &c
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

// slimTemplate keeps of a workload's pod template what templateWired and the selector read: the
// labels, whether the injection-status annotation is set (not its value:
// kit.TemplateMetaPresence), the ConfigMap volumes and the containers' mounts.
func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: kit.TemplateMetaPresence(t.ObjectMeta, contract.InjectionStatusAnnotation), Spec: slimPodSpec(&t.Spec)}
}
