package duck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// recordingReader remembers which kinds it was asked for: the kind of an unstructured object, the
// type of a typed one (e.g. *v1.Deployment).
type recordingReader struct{ kinds []string }

func (r *recordingReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		r.kinds = append(r.kinds, u.GetKind())
	} else {
		r.kinds = append(r.kinds, fmt.Sprintf("%T", obj))
	}
	return nil
}

func (r *recordingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	r.kinds = append(r.kinds, "list")
	return nil
}

func TestBuiltinCachedReaderRoutesByKind(t *testing.T) {
	cached, live := &recordingReader{}, &recordingReader{}
	r := &builtinCachedReader{cached: cached, live: live}
	for _, gvk := range append(BuiltinKinds(), gvkOf("Deployment").GroupVersion().WithKind("AgentSet"),
		customObject(true).GroupVersionKind()) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		require.NoError(t, r.Get(context.Background(), client.ObjectKey{Name: "x"}, u))
	}
	assert.Equal(t, []string{"*v1.Deployment", "*v1.StatefulSet", "*v1.DaemonSet", "*v1.ReplicaSet", "*v1.Job", "*v1.CronJob"}, cached.kinds,
		"built-in kinds come from the cache's typed informers (the ones TrimmedWorkloads trims), never an unstructured one")
	assert.Equal(t, []string{"AgentSet", "AgentSet"}, live.kinds,
		"other kinds (even one named like a built-in group) are read live, never starting an informer")
}

func TestManagerResolverOnAPIServer(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c, "manager-resolver")
	createBuiltins(t, c, ns)
	custom := customObject(true)
	custom.SetNamespace(ns)
	require.NoError(t, c.Create(context.Background(), custom))

	templateMetadata := func(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta}
	}
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: TrimmedWorkloads(templateMetadata)}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))

	r := NewManagerResolver(mgr)
	for _, gvk := range BuiltinKinds() {
		var w *Workload
		require.Eventually(t, func() bool {
			w, err = r.Resolve(ctx, ns, TargetRef{Kind: gvk.Kind, Name: "agent"})
			return err == nil
		}, 20*time.Second, 50*time.Millisecond, "%s: %v", gvk.Kind, err)
		assert.Equal(t, gvk, w.GroupVersionKind())
		assert.Equal(t, "agent", w.Name())
		assert.NotEmpty(t, w.UID())
		sel, err := w.Selector()
		require.NoError(t, err)
		if gvk.Kind == "Job" {
			assert.Contains(t, sel.String(), "controller-uid", "the API server's selector of a Job")
		} else {
			assert.Equal(t, "app=agent", sel.String(), gvk.Kind)
		}
		tmpl, err := w.PodTemplate()
		require.NoError(t, err)
		assert.Equal(t, "agent", tmpl.Labels["app"], gvk.Kind)
		assert.Empty(t, tmpl.Spec.Containers, "%s: read from the trimmed cache", gvk.Kind)
		assert.NotContains(t, w.Object().Object, "status", "the cache keeps no status, not even zero values")
	}
	w, err := r.Resolve(ctx, ns, TargetRef{APIVersion: "example.kagenti.io/v1", Kind: "AgentSet", Name: "custom"})
	require.NoError(t, err)
	assert.Equal(t, "custom", w.Name())
	_, err = r.Resolve(ctx, ns, TargetRef{Kind: "Deployment", Name: "missing"})
	assert.True(t, IsTargetNotFound(err), "%v", err)
}
