package kit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/pkg/duck"
)

func TestManagerResolverOnAPIServer(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c, "manager-resolver")
	createBuiltins(t, c, ns)
	custom := customObject()
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

	r := duck.NewManagerResolver(mgr)
	for _, gvk := range duck.BuiltinKinds() {
		var w *duck.Workload
		require.Eventually(t, func() bool {
			w, err = r.Resolve(ctx, ns, duck.TargetRef{Kind: gvk.Kind, Name: "agent"})
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
	w, err := r.Resolve(ctx, ns, duck.TargetRef{APIVersion: "example.kagenti.io/v1", Kind: "AgentSet", Name: "custom"})
	require.NoError(t, err)
	assert.Equal(t, "custom", w.Name())
	_, err = r.Resolve(ctx, ns, duck.TargetRef{Kind: "Deployment", Name: "missing"})
	assert.True(t, duck.IsTargetNotFound(err), "%v", err)
}
