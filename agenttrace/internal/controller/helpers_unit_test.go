package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

func traceVolume(cm string) corev1.Volume {
	return corev1.Volume{Name: contract.VolumeTrace, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
}

func TestMountsConfigMap(t *testing.T) {
	mount := []corev1.VolumeMount{{Name: contract.VolumeTrace, MountPath: "/etc/kagenti/trace"}}
	cases := map[string]struct {
		spec corev1.PodSpec
		want bool
	}{
		"volume mounted by a container": {corev1.PodSpec{Volumes: []corev1.Volume{traceVolume("a-trace")},
			Containers: []corev1.Container{{Name: "c", VolumeMounts: mount}}}, true},
		"volume mounted by a native sidecar": {corev1.PodSpec{Volumes: []corev1.Volume{traceVolume("a-trace")},
			InitContainers: []corev1.Container{{Name: "c", VolumeMounts: mount}}}, true},
		"volume of another ConfigMap": {corev1.PodSpec{Volumes: []corev1.Volume{traceVolume("b-trace")},
			Containers: []corev1.Container{{Name: "c", VolumeMounts: mount}}}, false},
		"volume never mounted": {corev1.PodSpec{Volumes: []corev1.Volume{traceVolume("a-trace")},
			Containers: []corev1.Container{{Name: "c"}}}, false},
		"no volumes": {corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { assert.Equal(t, tc.want, mountsConfigMap(&tc.spec, "a-trace")) })
	}
}

// The pod informer keeps exactly what configuredPods, podReferrers and the pod index read.
func TestCachedPod(t *testing.T) {
	deleted := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", Labels: map[string]string{"app": "a"}, ResourceVersion: "9",
			UID: "u-1", GenerateName: "a-", DeletionTimestamp: &deleted, Finalizers: []string{"f"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "a-1", UID: "u-0"}},
			Annotations:     map[string]string{"big": "x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{traceVolume("a-trace"), {Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				{Name: "c", Image: "i", Env: []corev1.EnvVar{{Name: "E", Value: "v"}},
					VolumeMounts: []corev1.VolumeMount{{Name: contract.VolumeTrace, MountPath: "/etc/kagenti/trace"}, {Name: "tmp", MountPath: "/tmp"}}},
				{Name: "sidecar", Image: "s", VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}},
			},
			InitContainers: []corev1.Container{{Name: "init", Image: "i"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	slim := newCachedPod(pod)
	assert.Equal(t, metav1.ObjectMeta{Name: "p", Namespace: "n", Labels: map[string]string{"app": "a"}, ResourceVersion: "9", DeletionTimestamp: &deleted},
		slim.ObjectMeta, "only what identifies, selects and counts the pod")
	assert.True(t, slim.running)
	assert.Equal(t, []string{"a-trace"}, podConfigMaps(slim), "the ConfigMaps a container mounts")
	assert.Equal(t, len(slim.configMaps), cap(slim.configMaps), "held for the pod's lifetime: no spare capacity")

	c := slim.DeepCopyObject().(*cachedPod)
	c.Labels["app"], c.configMaps[0] = "x", "x"
	assert.Equal(t, "a", slim.Labels["app"], "a copy shares nothing with the store's pod")
	assert.Equal(t, "a-trace", slim.configMaps[0])
}

// Pods are indexed only by the ConfigMaps a container of theirs mounts: that is what
// configuredPods counts, and each entry costs memory for every pod in the cluster.
func TestPodConfigMapsIndexesMountedConfigMapsOnly(t *testing.T) {
	mount := []corev1.VolumeMount{{Name: contract.VolumeTrace, MountPath: "/etc/kagenti/trace"}}
	unmounted := corev1.Volume{Name: "other", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "b-config"}}}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{traceVolume("a-trace"), unmounted},
		Containers: []corev1.Container{{Name: "c", VolumeMounts: mount}}}}
	assert.Equal(t, []string{"a-trace"}, podConfigMaps(newCachedPod(pod)))
	pod.Spec.Containers[0].VolumeMounts = nil
	assert.Empty(t, podConfigMaps(newCachedPod(pod)), "a ConfigMap volume no container mounts")
}

// The AgentTrace cache keeps neither managedFields nor kubectl's last-applied copy.
func TestStripAgentTrace(t *testing.T) {
	at := &v1alpha1.AgentTrace{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "n",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":"copy"}`, "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: v1alpha1.AgentTraceSpec{TargetRef: duckRef("Deployment", "agent")}}
	var transform func(any) (any, error)
	for obj, by := range CacheOptions().ByObject {
		if _, ok := obj.(*v1alpha1.AgentTrace); ok {
			transform = by.Transform
		}
	}
	if !assert.NotNil(t, transform, "the AgentTrace cache has its own transform") {
		return
	}
	out, err := transform(at)
	assert.NoError(t, err)
	slim := out.(*v1alpha1.AgentTrace)
	assert.Equal(t, map[string]string{"keep": "me"}, slim.Annotations)
	assert.Nil(t, slim.ManagedFields)
	assert.Equal(t, "agent", slim.Spec.TargetRef.Name)
}
