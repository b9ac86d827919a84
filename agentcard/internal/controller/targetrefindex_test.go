package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

// The AgentCards' targetRef index keeps each value once, under the AgentCard's namespace
// (kit.IndexTargetRefInNamespace): no cluster-wide copy, which controller-runtime's IndexField
// adds and no lookup of agentcard asks for (each names the workload's namespace).
func TestTargetRefIndexIsNamespacedOnly(t *testing.T) {
	ns := newNamespace(t)
	require.NoError(t, k8s.Create(context.Background(), &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "indexed"},
		Spec:       v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{Kind: "Deployment", Name: "indexed"}},
	}))
	inf, err := podCache.GetInformer(context.Background(), &v1alpha1.AgentCard{})
	require.NoError(t, err)
	indexer := inf.(interface{ GetIndexer() toolscache.Indexer }).GetIndexer()
	want := ns + "/" + duck.TargetKey(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "indexed")
	eventually(t, 30*time.Second, func() string {
		if !slices.Contains(indexer.ListIndexFuncValues("field:"+duck.TargetRefIndex), want) {
			return "no index entry " + want
		}
		return ""
	})
	for _, v := range indexer.ListIndexFuncValues("field:" + duck.TargetRefIndex) {
		assert.False(t, strings.HasPrefix(v, "__all_namespaces/"), "cluster-wide entry %q", v)
	}
}
