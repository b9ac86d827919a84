package duck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

var podLabels = map[string]string{"app": "agent"}

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:v1"}}},
	}
}

// jobTemplate is template() with the restart policy the API server requires of Jobs.
func jobTemplate() corev1.PodTemplateSpec {
	t := template()
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	return t
}

var selector = &metav1.LabelSelector{MatchLabels: podLabels}

// builtinObjects returns one object of every built-in kind, each with the given status.
func builtinObjects() map[string]runtime.Object {
	meta := metav1.ObjectMeta{Name: "agent", Namespace: "ns", UID: "uid-1", Generation: 2}
	return map[string]runtime.Object{
		"Deployment":  &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: selector, Template: template()}},
		"StatefulSet": &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: selector, Template: template()}},
		"DaemonSet":   &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template()}},
		"ReplicaSet":  &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: selector, Template: template()}},
		"Job":         &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: jobTemplate()}},
		"CronJob": &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: jobTemplate()}}}},
	}
}

func gvkOf(kind string) schema.GroupVersionKind {
	v, _ := DefaultAPIVersion(kind)
	gv, _ := schema.ParseGroupVersion(v)
	return gv.WithKind(kind)
}

func TestWorkloadViewEveryBuiltinKind(t *testing.T) {
	for kind, obj := range builtinObjects() {
		t.Run(kind, func(t *testing.T) {
			w, err := NewWorkloadFromObject(obj, gvkOf(kind))
			require.NoError(t, err)
			assert.Equal(t, "agent", w.Name())
			assert.Equal(t, "ns", w.Namespace())
			assert.Equal(t, kind, w.Kind())
			assert.EqualValues(t, "uid-1", w.UID())

			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			assert.Equal(t, "agent:v1", tmpl.Spec.Containers[0].Image)

			sel, err := w.Selector()
			require.NoError(t, err)
			assert.Equal(t, "app=agent", sel.String())

			// Write through the view and read the change back from the underlying object.
			tmpl.Spec.Containers[0].Image = "agent:v2"
			tmpl.Annotations = map[string]string{"k": "v"}
			require.NoError(t, w.SetPodTemplate(tmpl))
			again, err := NewWorkload(w.Object())
			require.NoError(t, err)
			got, err := again.PodTemplate()
			require.NoError(t, err)
			assert.Equal(t, "agent:v2", got.Spec.Containers[0].Image)
			assert.Equal(t, "v", got.Annotations["k"])
		})
	}
}

func TestCronJobTemplatePath(t *testing.T) {
	w, err := NewWorkloadFromObject(builtinObjects()["CronJob"], gvkOf("CronJob"))
	require.NoError(t, err)
	assert.Equal(t, []string{"spec", "jobTemplate", "spec", "template"}, w.TemplatePath())
}

func customObject(withTemplate bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.kagenti.io/v1", "kind": "AgentSet",
		"metadata": map[string]any{"name": "custom", "namespace": "ns", "generation": int64(1)},
		"spec":     map[string]any{"replicas": int64(2)},
	}}
	if withTemplate {
		tm, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.To(template()))
		_ = unstructured.SetNestedMap(u.Object, tm, "spec", "template")
	}
	return u
}

func TestCustomKindWithPodTemplate(t *testing.T) {
	w, err := NewWorkload(customObject(true))
	require.NoError(t, err)
	sel, err := w.Selector()
	require.NoError(t, err)
	assert.Equal(t, "app=agent", sel.String(), "custom kinds without spec.selector select by template labels")
	assert.False(t, w.Readiness().Ready)
	assert.Equal(t, "no readiness reported", w.Readiness().Message)

	u := w.Object()
	_ = unstructured.SetNestedField(u.Object, int64(1), "status", "observedGeneration")
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Ready", "status": "True"}}, "status", "conditions")
	assert.True(t, w.Readiness().Ready)
}

func TestUnsupportedShape(t *testing.T) {
	_, err := NewWorkload(customObject(false))
	require.Error(t, err)
	assert.True(t, IsUnsupportedKind(err))
	assert.Contains(t, err.Error(), "no pod template at spec.template")

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	_, err = NewWorkloadFromObject(cm, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	assert.True(t, IsUnsupportedKind(err))
}

func TestReadiness(t *testing.T) {
	cases := []struct {
		name   string
		kind   string
		mutate func(runtime.Object)
		ready  bool
		msg    string
	}{
		{"deployment not ready", "Deployment", func(o runtime.Object) {
			o.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{ObservedGeneration: 2, ReadyReplicas: 1, UpdatedReplicas: 3}
		}, false, "1/3 replicas ready"},
		{"deployment ready", "Deployment", func(o runtime.Object) {
			o.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdatedReplicas: 3}
		}, true, "3/3 replicas ready"},
		{"deployment rolling", "Deployment", func(o runtime.Object) {
			o.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdatedReplicas: 1}
		}, false, "rollout in progress: 1/3 replicas updated"},
		{"deployment stale status", "Deployment", func(o runtime.Object) {
			o.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{ObservedGeneration: 1, ReadyReplicas: 3, UpdatedReplicas: 3}
		}, false, "3/3 replicas ready"},
		{"statefulset", "StatefulSet", func(o runtime.Object) {
			o.(*appsv1.StatefulSet).Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 2}
		}, true, "2/2 replicas ready"},
		{"daemonset", "DaemonSet", func(o runtime.Object) {
			o.(*appsv1.DaemonSet).Status = appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 4, NumberReady: 3}
		}, false, "3/4 replicas ready"},
		{"job running", "Job", func(o runtime.Object) {
			o.(*batchv1.Job).Status = batchv1.JobStatus{Active: 1}
		}, false, "running: 1 active, 0 succeeded"},
		{"job complete", "Job", func(o runtime.Object) {
			o.(*batchv1.Job).Status = batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
		}, true, "complete (1 succeeded)"},
		{"job failed", "Job", func(o runtime.Object) {
			o.(*batchv1.Job).Status = batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}
		}, false, "failed"},
		{"cronjob suspended", "CronJob", func(o runtime.Object) { o.(*batchv1.CronJob).Spec.Suspend = ptr.To(true) }, false, "suspended"},
		{"cronjob scheduled", "CronJob", func(o runtime.Object) {}, true, "scheduled, 0 active jobs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := builtinObjects()[tc.kind]
			tc.mutate(obj)
			w, err := NewWorkloadFromObject(obj, gvkOf(tc.kind))
			require.NoError(t, err)
			r := w.Readiness()
			assert.Equal(t, tc.ready, r.Ready)
			assert.Equal(t, tc.msg, r.Message)
		})
	}
}
