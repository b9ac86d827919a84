package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kagenti/platform/agentcard/internal/controller"
)

// The pod informer of the running controller carries PodLabelIndex once per label and namespace:
// no controller-runtime field index on pods (which stores every value a second time under a
// cluster-wide key) and no cluster-wide entry.
func TestPodLabelIndexIsNamespacedOnly(t *testing.T) {
	ns := newNamespace(t)
	makePod(t, ns, "indexed", "127.0.94.1", "default", map[string]string{"app": "indexed", "pod-template-hash": "abc"})

	inf, err := podCache.GetInformer(context.Background(), &corev1.Pod{})
	require.NoError(t, err)
	indexer := inf.(interface{ GetIndexer() toolscache.Indexer }).GetIndexer()
	for name := range indexer.GetIndexers() {
		assert.False(t, strings.HasPrefix(name, "field:"), "pod informer has the controller-runtime field index %q", name)
	}
	eventually(t, 30*time.Second, func() string {
		if !slices.Contains(indexer.ListIndexFuncValues(controller.PodLabelIndex), ns+"/app=indexed") {
			return "no index entry " + ns + "/app=indexed"
		}
		return ""
	})
	for _, v := range indexer.ListIndexFuncValues(controller.PodLabelIndex) {
		assert.False(t, strings.HasPrefix(v, "__all_namespaces/"), "cluster-wide entry %q", v)
		assert.NotContains(t, v, "pod-template-hash", "unindexed label %q", v)
	}
}
