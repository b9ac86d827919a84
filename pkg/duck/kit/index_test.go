package kit

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// TestIndexFieldInNamespace checks the namespaced-only index against controller-runtime's cache
// reader on a real API server: a namespaced List with the field finds exactly the objects of that
// namespace with that value, and the informer's index holds no cluster-wide copy of any value.
func TestIndexFieldInNamespace(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nsA, nsB := namespace(t, c, "index-a"), namespace(t, c, "index-b")
	run := nsA // the cache holds this run's ConfigMaps only (a test may run more than once per API server)

	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{"run": run})}}}})
	require.NoError(t, err)
	const field = "test.color"
	color := func(o client.Object) []string {
		if v := o.GetLabels()["color"]; v != "" {
			return []string{v}
		}
		return nil
	}
	require.NoError(t, IndexFieldInNamespace(ctx, mgr.GetCache(), &corev1.ConfigMap{}, field, color))

	for _, cm := range []struct{ ns, name, color string }{{nsA, "red-a", "red"}, {nsA, "blue-a", "blue"}, {nsB, "red-b", "red"}, {nsA, "plain", ""}} {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.ns, Name: cm.name, Labels: map[string]string{"run": run}}}
		if cm.color != "" {
			obj.Labels["color"] = cm.color
		}
		require.NoError(t, c.Create(ctx, obj))
	}
	go func() { _ = mgr.Start(ctx) }()
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))

	names := func(ns, value string) []string {
		var list corev1.ConfigMapList
		require.NoError(t, mgr.GetClient().List(ctx, &list, client.InNamespace(ns), client.MatchingFields{field: value}))
		var out []string
		for _, cm := range list.Items {
			out = append(out, cm.Namespace+"/"+cm.Name)
		}
		return out
	}
	// The cache started after the creates: its first List holds all four.
	assert.Equal(t, []string{nsA + "/red-a"}, names(nsA, "red"))
	assert.Equal(t, []string{nsB + "/red-b"}, names(nsB, "red"))
	assert.Equal(t, []string{nsA + "/blue-a"}, names(nsA, "blue"))
	assert.Empty(t, names(nsB, "blue"))

	informer, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
	require.NoError(t, err)
	indexed, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	require.True(t, ok, "the cache's informer %T exposes its indexer", informer)
	keys := indexed.GetIndexer().ListIndexFuncValues("field:" + field)
	assert.ElementsMatch(t, []string{nsA + "/red", nsA + "/blue", nsB + "/red"}, keys, "each value once, under its object's namespace only")
	for _, k := range keys {
		assert.False(t, strings.HasPrefix(k, "__all_namespaces/"), "cluster-wide copy %q", k)
	}
}
