package controller

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}, Annotations: map[string]string{contract.InjectionStatusAnnotation: "{}"}},
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
			// Typed, as the cache holds the built-in kinds (kit.TrimmedWorkloads).
			out, err := kit.TrimWorkload(slimTemplate)(tc.obj.DeepCopyObject())
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
			assert.Contains(t, tmpl.Annotations, contract.InjectionStatusAnnotation)
			assert.Empty(t, tmpl.Spec.Containers, "the pod spec is not cached")
			sel, err := w.Selector()
			require.NoError(t, err)
			assert.Equal(t, "app=agent", sel.String())
		})
	}
}

// TestCachedPod: the pod informer keeps what the reconciler, the prober and the index read, and
// nothing of the rest.
func TestCachedPod(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", UID: "u1", Labels: map[string]string{"app": "agent"}, Annotations: map[string]string{"a": "b"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "agent-1"}}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "agent", Image: "x"}, {Name: contract.ComponentAuthProxy, Image: "x"}},
			InitContainers: []corev1.Container{{Name: contract.ComponentSpiffeHelper, Image: "x"}, {Name: contract.ComponentEnvoyProxy, Image: "x"}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: contract.VolumeTokenExchange, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-token-exchange"}}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			InitContainerStatuses: []corev1.ContainerStatus{{Name: contract.ComponentSpiffeHelper, Ready: true, Image: "x", ImageID: "y"}, {Name: contract.ComponentEnvoyProxy}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "agent", Ready: true}, {Name: contract.ComponentAuthProxy, Ready: true}}},
	}
	got := newCachedPod(p)
	assert.Equal(t, metav1.ObjectMeta{Name: "p", Namespace: "team", UID: "u1", Labels: map[string]string{"app": "agent"}}, got.ObjectMeta,
		"no annotations, owners or managedFields: nothing reads them")
	assert.Equal(t, "agent-token-exchange", got.configMap)
	assert.Equal(t, []string{"agent-token-exchange"}, podTokenExchangeConfigMap(got))
	// Injection v4 projects the ConfigMap into the identity volume.
	lean := p.DeepCopy()
	lean.Spec.Volumes[1] = corev1.Volume{Name: contract.VolumeIdentity, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{DownwardAPI: &corev1.DownwardAPIProjection{}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-token-exchange"}}},
	}}}}
	assert.Equal(t, "agent-token-exchange", newCachedPod(lean).configMap)
	lean.Spec.Volumes[1].Name = "theirs"
	assert.Empty(t, newCachedPod(lean).configMap, "a projected volume of the user's")
	assert.True(t, got.running)
	assert.Equal(t, "10.0.0.7", got.ip)
	assert.Equal(t, []string{contract.ComponentAuthProxy, contract.ComponentEnvoyProxy}, got.roles,
		"the roles with a status port (spiffe-helper has none), from init and classic containers: the status prober asks them")
	assert.Equal(t, len(got.roles), cap(got.roles), "held for the pod's lifetime: no spare capacity")
	pods := []*cachedPod{got}
	assert.True(t, allReady(pods, contract.ComponentSpiffeHelper), "ready as a native sidecar")
	assert.True(t, allReady(pods, contract.ComponentAuthProxy), "ready as a classic container")
	assert.False(t, allReady(pods, contract.ComponentEnvoyProxy), "not ready")
	assert.False(t, allReady(pods, contract.ComponentClientRegistration), "absent")

	ps := summarizePods(pods, "agent-token-exchange")
	assert.Len(t, ps.pods, 1)
	assert.Empty(t, summarizePods(pods, "other-token-exchange").pods, "counted only for the ConfigMap it mounts")

	// A copy shares nothing the store's pod holds.
	c := got.DeepCopyObject().(*cachedPod)
	c.Labels["app"], c.roles[0] = "x", "x"
	assert.Equal(t, "agent", got.Labels["app"])
	assert.Equal(t, contract.ComponentAuthProxy, got.roles[0])
}

// TestCompactTokenExchange: the TokenExchange cache keeps neither managedFields nor kubectl's
// last-applied copy, and holds the conditions in a slice of exactly their number, unchanged.
func TestCompactTokenExchange(t *testing.T) {
	te := &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "n",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":"copy"}`, "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	te.Status.Conditions = make([]metav1.Condition, 0, 8)
	for _, c := range []string{v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady, duck.ConditionReady} {
		te.Status.Conditions = append(te.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "R", Message: c})
	}
	want := slices.Clone(te.Status.Conditions)
	var transform func(any) (any, error)
	for obj, by := range CacheByObject() {
		if _, ok := obj.(*v1alpha1.TokenExchange); ok {
			transform = by.Transform
		}
	}
	require.NotNil(t, transform, "the TokenExchange cache has its own transform")
	out, err := transform(te)
	require.NoError(t, err)
	got := out.(*v1alpha1.TokenExchange)
	assert.Equal(t, map[string]string{"keep": "me"}, got.Annotations)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, want, got.Status.Conditions)
	assert.Equal(t, len(want), cap(got.Status.Conditions))
}

// TestCompactConfigMap: a ConfigMap carrying exactly the labels the controller writes holds the
// one shared map; any other keeps its own; content is dropped for its hash either way.
func TestCompactConfigMap(t *testing.T) {
	var transform func(any) (any, error)
	for obj, by := range CacheByObject() {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			transform = by.Transform
		}
	}
	require.NotNil(t, transform)
	written := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a-token-exchange", Labels: maps.Clone(configMapLabels)}, Data: map[string]string{"k": "v"}}
	out, err := transform(written)
	require.NoError(t, err)
	got := out.(*corev1.ConfigMap)
	assert.Equal(t, reflect.ValueOf(configMapLabels).UnsafePointer(), reflect.ValueOf(got.Labels).UnsafePointer(), "the shared map")
	assert.Nil(t, got.Data, "metadata and a hash of the content only")

	extra := maps.Clone(configMapLabels)
	extra["team"] = "a"
	out, err = transform(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b-token-exchange", Labels: extra}})
	require.NoError(t, err)
	assert.Equal(t, extra, out.(*corev1.ConfigMap).Labels, "labels someone added are kept")
	assert.Len(t, configMapLabels, 3, "the shared map is never changed")
}
