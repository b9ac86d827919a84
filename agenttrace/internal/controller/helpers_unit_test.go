package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/configmap"
)

func traceVolume(cm string) corev1.Volume {
	return corev1.Volume{Name: configmap.VolumeTrace, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
}

func TestMountsConfigMap(t *testing.T) {
	mount := []corev1.VolumeMount{{Name: configmap.VolumeTrace, MountPath: "/etc/kagenti/trace"}}
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

// The pod cache keeps exactly what configuredPods and the pod→AgentTrace mapping read.
func TestStripPod(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", Labels: map[string]string{"app": "a"},
			Annotations: map[string]string{"big": "x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{traceVolume("a-trace"), {Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "c", Image: "i", Env: []corev1.EnvVar{{Name: "E", Value: "v"}},
				VolumeMounts: []corev1.VolumeMount{{Name: configmap.VolumeTrace, MountPath: "/etc/kagenti/trace"}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	out, err := stripPod(pod)
	assert.NoError(t, err)
	slim := out.(*corev1.Pod)
	assert.Equal(t, pod.Labels, slim.Labels)
	assert.Nil(t, slim.Annotations)
	assert.Nil(t, slim.ManagedFields)
	assert.Equal(t, corev1.PodRunning, slim.Status.Phase)
	assert.Empty(t, slim.Status.PodIP)
	assert.Len(t, slim.Spec.Volumes, 1)
	assert.Empty(t, slim.Spec.Containers[0].Env)
	assert.True(t, mountsConfigMap(&slim.Spec, "a-trace"))
}
