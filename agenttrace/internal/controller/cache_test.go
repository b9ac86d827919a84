package controller

import (
	"context"
	"fmt"
	"slices"
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
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
	"github.com/kagenti/platform/pkg/duck/kit"
)

func TestTrimWorkloadKeepsWhatTheReconcilerReads(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "agent", Namespace: "ns", ResourceVersion: "7",
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"huge":"copy"}`, "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}, Annotations: map[string]string{contract.InjectionStatusAnnotation: "{}"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1",
				Env:          []corev1.EnvVar{{Name: "A", Value: "never read here"}},
				VolumeMounts: []corev1.VolumeMount{{Name: "trace", MountPath: "/etc/kagenti/trace"}}}},
			Volumes: []corev1.Volume{
				{Name: "trace", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-trace"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	cases := map[string]struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{
		"Deployment": {&appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: tmpl}},
			appsv1.SchemeGroupVersion.WithKind("Deployment")},
		"CronJob (template under jobTemplate)": {&batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}},
			batchv1.SchemeGroupVersion.WithKind("CronJob")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.obj)
			require.NoError(t, err)
			in := &unstructured.Unstructured{Object: m}
			in.SetGroupVersionKind(tc.gvk)
			out, err := kit.TrimWorkload(slimTemplate)(in)
			require.NoError(t, err)
			u := out.(*unstructured.Unstructured)
			w, err := duck.NewWorkload(u)
			require.NoError(t, err)
			assert.Equal(t, "agent", w.Name())
			assert.Equal(t, "7", u.GetResourceVersion())
			assert.Equal(t, map[string]string{"keep": "me"}, u.GetAnnotations())
			assert.Empty(t, u.GetManagedFields())
			wired, err := templateWired(w, "agent-trace")
			require.NoError(t, err)
			assert.True(t, wired)
			got, err := w.PodTemplate()
			require.NoError(t, err)
			assert.True(t, mountsConfigMap(&got.Spec, "agent-trace"), "the trace mount survives")
			assert.Len(t, got.Spec.Volumes, 1, "only ConfigMap volumes are kept")
			assert.Empty(t, got.Spec.Containers[0].Env)
			assert.Empty(t, got.Spec.Containers[0].Image)
			sel, err := w.Selector()
			require.NoError(t, err)
			assert.Equal(t, "app=agent", sel.String())
		})
	}
}

// The informers hold an index entry per object and value, so Setup indexes only what a lookup
// reads: AgentTraces by target (and pods, in their own informer, by the ConfigMaps they mount:
// TestCachedPod). A pod maps to its AgentTrace through the owner of the ConfigMap it mounts,
// which the ConfigMap cache already holds.
func TestCacheIndexesOnlyWhatIsLookedUp(t *testing.T) {
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: CacheOptions(), Client: ClientOptions(),
		Controller: config.Controller{SkipNameValidation: ptr(true)}}) // the suite's manager runs one already
	require.NoError(t, err)
	require.NoError(t, Setup(mgr, Options{}))
	for obj, want := range map[client.Object][]string{
		&v1alpha1.AgentTrace{}: {toolscache.NamespaceIndex, "field:" + duck.TargetRefIndex},
	} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		require.NoError(t, err)
		var got []string
		for name := range inf.(toolscache.SharedIndexInformer).GetIndexer().GetIndexers() {
			got = append(got, name)
		}
		assert.ElementsMatch(t, want, got, "%T", obj)
	}
}

// A built-in workload kind is watched (an informer caching every object of that kind) only once an
// AgentTrace targets it; a target of that kind created afterwards still reaches its AgentTrace.
func TestWorkloadKindsWatchedOnceTargeted(t *testing.T) {
	ns := newNamespace(t)
	opts := CacheOptions()
	opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	watched := ducktest.RecordInformers(&opts, testScheme, duck.BuiltinKinds())
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: opts, Client: ClientOptions(), Controller: config.Controller{SkipNameValidation: ptr(true)}})
	require.NoError(t, err)
	require.NoError(t, Setup(mgr, Options{}))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.True(t, mgr.GetCache().WaitForCacheSync(mctx))
	assert.Empty(t, watched(), "no AgentTrace targets a workload yet")

	at := agentTrace(ns, "db-trace", "db")
	at.Spec.TargetRef = duck.TargetRef{Kind: "StatefulSet", Name: "db"}
	create(t, at)
	eventually(t, "the StatefulSet watch", func() string {
		if kinds := watched(); !slices.Equal(kinds, []string{"StatefulSet"}) {
			return fmt.Sprintf("watched %v", kinds)
		}
		return ""
	})
	waitStatus(t, ns, "db-trace", v1alpha1.PhasePending, duck.ReasonTargetNotFound)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Template: newDeploymentObj(ns, "db").Spec.Template,
	}}
	create(t, sts)
	waitStatus(t, ns, "db-trace", v1alpha1.PhaseActive, v1alpha1.ReasonTargetNotInjected)
	assert.Equal(t, []string{"StatefulSet"}, watched(), "only the kind targeted")
}
