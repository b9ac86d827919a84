package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestReconcileListsOnlyItsOwnPolicies: a reconcile looks up the policies its card controls through
// the cache index, not by listing every netpol policy of the namespace. With n cards in one
// namespace a listing made a first sync cost n² policy copies (quadratic at 10,000 cards); here each
// reconcile of a converged card sees one policy, its own.
func TestReconcileListsOnlyItsOwnPolicies(t *testing.T) {
	const cards = 30
	ctx := context.Background()
	ns := namespace(t)
	for i := range cards {
		name := fmt.Sprintf("agent-%d", i)
		deployment(t, k8s, ns, name)
		agentCard(t, k8s, ns, name+"-card", targetSpec("Deployment", name))
	}
	mgr := newManager(t, restConfig)
	require.NoError(t, indexFields(ctx, mgr))
	startManager(t, mgr)
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))

	var listed atomic.Int64
	cached, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true}})
	require.NoError(t, err)
	c := interceptor.NewClient(cached, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		err := c.List(ctx, list, opts...)
		if l, ok := list.(*networkingv1.NetworkPolicyList); ok {
			listed.Add(int64(len(l.Items)))
		}
		return err
	}})
	r := newReconciler(mgr, c, DefaultOptions())

	reconcileAll := func() {
		for i := range cards {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("agent-%d-card", i)}})
			require.NoError(t, err)
		}
	}
	reconcileAll()
	eventually(t, "every policy in the cache", func() (bool, string) {
		var list networkingv1.NetworkPolicyList
		require.NoError(t, mgr.GetCache().List(ctx, &list, client.InNamespace(ns)))
		return len(list.Items) == cards, fmt.Sprintf("%d of %d", len(list.Items), cards)
	})
	listed.Store(0)
	reconcileAll()
	require.Equal(t, int64(cards), listed.Load(), "policies listed by %d reconciles of converged cards: each should see only its own", cards)
}
