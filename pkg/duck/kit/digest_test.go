package kit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestApplyThroughDigestedCache runs the Applier the way a controller does, reading from an
// informer cache, with DigestTransform dropping the content from the cached ConfigMaps.
func TestApplyThroughDigestedCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := uniqueNamespace("digest")
	direct, err := client.New(testCfg, client.Options{Scheme: testScheme})
	require.NoError(t, err)
	require.NoError(t, direct.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	own := owner(t, direct, ns, "owner")

	informers, err := cache.New(testCfg, cache.Options{Scheme: testScheme,
		ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Transform: DigestTransform}}})
	require.NoError(t, err)
	go func() { _ = informers.Start(ctx) }()
	require.True(t, informers.WaitForCacheSync(ctx))
	// Informers start on first use: make the ConfigMap one start before the first Apply.
	require.NoError(t, informers.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)))
	cached, err := client.NewWithWatch(testCfg, client.Options{Scheme: testScheme, Cache: &client.CacheOptions{Reader: informers}})
	require.NoError(t, err)
	writes := 0
	counted := interceptor.NewClient(cached, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
	})
	a := &Applier{Client: counted, Scheme: testScheme, ManagedBy: "kagenti-test"}
	key := client.ObjectKey{Namespace: ns, Name: "agent-trace"}
	// waitCached waits until the cache holds the server's current content.
	waitCached := func() *corev1.ConfigMap {
		t.Helper()
		var server, inCache corev1.ConfigMap
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := direct.Get(ctx, key, &server); err != nil {
				return false, err
			}
			err := informers.Get(ctx, key, &inCache)
			return err == nil && inCache.ResourceVersion == server.ResourceVersion, client.IgnoreNotFound(err)
		}))
		assert.Nil(t, inCache.Data, "the cache holds no content")
		assert.Equal(t, ContentHash(&server), inCache.Annotations[digestAnnotation], "the cache holds the hash of the stored content")
		assert.NotContains(t, server.Annotations, digestAnnotation, "the digest is never written")
		return &server
	}

	res, err := a.Apply(ctx, desired(ns, map[string]string{"config.yaml": "a: 1"}), own)
	require.NoError(t, err)
	assert.Equal(t, Created, res)
	waitCached()
	for range 3 {
		res, err = a.Apply(ctx, desired(ns, map[string]string{"config.yaml": "a: 1"}), own)
		require.NoError(t, err)
		assert.Equal(t, Unchanged, res)
	}
	assert.Equal(t, 1, writes, "unchanged content costs no write, digested or not")

	res, err = a.Apply(ctx, desired(ns, map[string]string{"config.yaml": "a: 2"}), own)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
	assert.Equal(t, "a: 2", waitCached().Data["config.yaml"])

	// A hand edit of the content changes the digest; the next Apply repairs it.
	server := waitCached()
	server.Data["config.yaml"] = "tampered"
	require.NoError(t, direct.Update(ctx, server))
	waitCached()
	res, err = a.Apply(ctx, desired(ns, map[string]string{"config.yaml": "a: 2"}), own)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
	assert.Equal(t, "a: 2", waitCached().Data["config.yaml"])
}

func TestDigestTransform(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "x", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Data:       map[string]string{"k": "v"}, BinaryData: map[string][]byte{"b": {1}},
	}
	want := ContentHash(cm)
	out, err := DigestTransform(cm)
	require.NoError(t, err)
	got := out.(*corev1.ConfigMap)
	assert.Nil(t, got.Data)
	assert.Nil(t, got.BinaryData)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, want, observedHash(got))
	s := &corev1.Secret{}
	out, err = DigestTransform(s)
	require.NoError(t, err)
	assert.Same(t, s, out, "other types pass through")
}
