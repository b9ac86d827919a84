package duck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// recordingReader remembers which kinds it was asked for.
type recordingReader struct{ kinds []string }

func (r *recordingReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.kinds = append(r.kinds, obj.GetObjectKind().GroupVersionKind().Kind)
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
	assert.Equal(t, []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}, cached.kinds,
		"built-in kinds come from the informer cache")
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

	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))

	r := NewManagerResolver(mgr)
	require.Eventually(t, func() bool {
		w, err := r.Resolve(ctx, ns, TargetRef{Kind: "CronJob", Name: "agent"})
		return err == nil && w.Kind() == "CronJob"
	}, 20*time.Second, 50*time.Millisecond)
	w, err := r.Resolve(ctx, ns, TargetRef{APIVersion: "example.kagenti.io/v1", Kind: "AgentSet", Name: "custom"})
	require.NoError(t, err)
	assert.Equal(t, "custom", w.Name())
	_, err = r.Resolve(ctx, ns, TargetRef{Kind: "Deployment", Name: "missing"})
	assert.True(t, IsTargetNotFound(err), "%v", err)
}
