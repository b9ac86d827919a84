package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// TestCachedAgentCardsShareTheirCardBytes: two AgentCards whose pods serve the same card hold one
// copy of its bytes in the controller's cache (status.card as the API server sends it), not one
// each.
func TestCachedAgentCardsShareTheirCardBytes(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	body := testcards.Weather("1.0.0")
	serveCard(t, "127.42.77.1", body)
	serveCard(t, "127.42.77.2", body)
	makePod(t, ns, "first-1", "127.42.77.1", "agent", map[string]string{"app": "first"})
	makePod(t, ns, "second-1", "127.42.77.2", "agent", map[string]string{"app": "second"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "first", map[string]string{"app": "first"})))
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "second", map[string]string{"app": "second"})))

	inf, err := podCache.GetInformer(ctx, &v1alpha1.AgentCard{})
	require.NoError(t, err)
	store := inf.(toolscache.SharedIndexInformer).GetStore()
	cachedCard := func(name string) []byte {
		o, ok, err := store.GetByKey(ns + "/" + name)
		if err != nil || !ok {
			return nil
		}
		if c := o.(*v1alpha1.AgentCard); c.Status.Card != nil {
			return c.Status.Card.Raw
		}
		return nil
	}
	eventually(t, 20*time.Second, func() string {
		if a, b := cachedCard("first"), cachedCard("second"); len(a) == 0 || len(b) == 0 {
			return fmt.Sprintf("status.card in the cache: first %d bytes, second %d bytes", len(a), len(b))
		}
		return ""
	})
	a, b := cachedCard("first"), cachedCard("second")
	require.Equal(t, string(a), string(b))
	require.Same(t, unsafe.SliceData(a), unsafe.SliceData(b), "the two cached AgentCards hold copies of their own of the same card")
}
