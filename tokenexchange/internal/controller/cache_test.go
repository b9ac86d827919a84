package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
)

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}, Annotations: map[string]string{configmap.InjectionStatusAnnotation: "{}"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "agent-sa",
			Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1",
				Env: []corev1.EnvVar{{Name: "A", Value: "a long value the controller never reads"}}}},
		},
	}
}

func TestTrimWorkloadKeepsWhatTheReconcilerReads(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "agent", Namespace: "ns", UID: "u1", ResourceVersion: "7", Generation: 3,
		Labels:        map[string]string{"team": "a"},
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"huge":"copy"}`, "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	cases := map[string]struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{
		"Deployment": {&appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: podTemplate()}},
			appsv1.SchemeGroupVersion.WithKind("Deployment")},
		"CronJob (template under jobTemplate)": {&batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podTemplate()}}}},
			batchv1.SchemeGroupVersion.WithKind("CronJob")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Typed, as the cache holds the built-in kinds (duck.TrimmedWorkloads).
			out, err := duck.TrimWorkload(slimTemplate)(tc.obj.DeepCopyObject())
			require.NoError(t, err)
			assert.IsType(t, tc.obj, out)
			w, err := duck.NewWorkloadFromObject(out.(runtime.Object), tc.gvk)
			require.NoError(t, err)
			u := w.Object()
			assert.Equal(t, tc.gvk.Kind, w.Kind())
			assert.Equal(t, "agent", w.Name())
			assert.Equal(t, "7", u.GetResourceVersion())
			assert.Equal(t, map[string]string{"keep": "me"}, u.GetAnnotations(), "kubectl's last-applied copy is dropped")
			assert.Empty(t, u.GetManagedFields())
			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			assert.Equal(t, "agent-sa", tmpl.Spec.ServiceAccountName)
			assert.Contains(t, tmpl.Annotations, configmap.InjectionStatusAnnotation)
			assert.Empty(t, tmpl.Spec.Containers, "the pod spec is not cached")
			sel, err := w.Selector()
			require.NoError(t, err)
			assert.Equal(t, "app=agent", sel.String())
		})
	}
}

func TestTrimPod(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "agent"}, Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "agent", Image: "x"}},
			InitContainers: []corev1.Container{{Name: configmap.ComponentSpiffeHelper, Image: "x"}, {Name: configmap.ComponentEnvoyProxy, Image: "x"}},
			Volumes: []corev1.Volume{
				{Name: configmap.VolumeTokenExchange, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-token-exchange"}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", InitContainerStatuses: []corev1.ContainerStatus{{Name: configmap.ComponentSpiffeHelper, Ready: true, Image: "x", ImageID: "y"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: true}}},
	}
	out, err := TrimPod(p)
	require.NoError(t, err)
	got := out.(*corev1.Pod)
	assert.True(t, mountsTokenExchange(got, "agent-token-exchange"))
	assert.Len(t, got.Spec.Volumes, 1)
	assert.Empty(t, got.Spec.Containers, "the agent's containers are never read")
	assert.Equal(t, []corev1.Container{{Name: configmap.ComponentEnvoyProxy}}, got.Spec.InitContainers,
		"names only, of the roles with a status port (spiffe-helper has none): the status prober looks for them")
	assert.Equal(t, []string{configmap.ComponentEnvoyProxy}, roleContainers(got))
	assert.Empty(t, got.Status.ContainerStatuses, "only the identity components' readiness is read")
	assert.Empty(t, got.Annotations)
	assert.Equal(t, map[string]string{"app": "agent"}, got.Labels)
	assert.True(t, allReady([]*corev1.Pod{got}, configmap.ComponentSpiffeHelper))
	assert.Equal(t, "10.0.0.7", got.Status.PodIP)
}

// TestTrimPodKeepsNoSpareCapacity: the kept containers and statuses are held as long as the pod
// exists; a slice grown by append would hold room for a fourth container of three kept.
func TestTrimPodKeepsNoSpareCapacity(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{}, Status: corev1.PodStatus{}}
	for _, c := range []string{configmap.ComponentSpiffeHelper, configmap.ComponentClientRegistration, configmap.ComponentAuthProxy, configmap.ComponentEnvoyProxy} {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: c, Image: "x"})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c, Ready: true})
	}
	out, err := TrimPod(p)
	require.NoError(t, err)
	got := out.(*corev1.Pod)
	assert.Len(t, got.Spec.InitContainers, 3, "the roles with a status port")
	assert.Equal(t, len(got.Spec.InitContainers), cap(got.Spec.InitContainers))
	assert.Len(t, got.Status.InitContainerStatuses, 4, "the identity components")
	assert.Equal(t, len(got.Status.InitContainerStatuses), cap(got.Status.InitContainerStatuses))
}
