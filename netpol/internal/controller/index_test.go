package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/view"
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

// TestConditionWrittenOnceWhileTheCacheLags: a card reconciled again before the cache shows the
// status just written (its policy's creation and its workload's events queue it meanwhile) does
// not get the same NetworkPolicyReady written a second time. The test freezes the cached card at
// its first read; the second reconcile sees the old status, as it does when the cache lags.
func TestConditionWrittenOnceWhileTheCacheLags(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	deployment(t, k8s, ns, "lagging")
	agentCard(t, k8s, ns, "lagging-card", targetSpec("Deployment", "lagging"))
	mgr := newManager(t, restConfig)
	require.NoError(t, indexFields(ctx, mgr))
	startManager(t, mgr)
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))

	cached, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true}})
	require.NoError(t, err)
	var frozen *unstructured.Unstructured
	var thawed atomic.Bool
	var statusWrites atomic.Int64
	c := interceptor.NewClient(cached, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok || u.GroupVersionKind() != view.AgentCardGVK || thawed.Load() {
				return c.Get(ctx, key, obj, opts...)
			}
			if frozen == nil {
				if err := c.Get(ctx, key, obj, opts...); err != nil {
					return err
				}
				frozen = u.DeepCopy()
				return nil
			}
			frozen.DeepCopyInto(u)
			return nil
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			statusWrites.Add(1)
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
	r := newReconciler(mgr, c, DefaultOptions())
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "lagging-card"}}
	for range 3 {
		_, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), statusWrites.Load(), "status writes by three reconciles of an unchanged card")
	waitCondition(t, ns, "lagging-card", "True", api.ReasonRestrictive)

	// The cache catches up: the card is reconciled without a write, and netpol no longer keeps a
	// note of the condition it wrote (a converged card costs no entry).
	thawed.Store(true)
	eventually(t, "the cache shows the condition", func() (bool, string) {
		u := view.NewAgentCard()
		require.NoError(t, mgr.GetCache().Get(ctx, req.NamespacedName, u))
		card, err := view.FromUnstructured(u)
		require.NoError(t, err)
		return card.Condition(api.ConditionNetworkPolicyReady) != nil, "not yet"
	})
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(1), statusWrites.Load(), "status writes after the cache caught up")
	r.written.mu.Lock()
	defer r.written.mu.Unlock()
	require.Empty(t, r.written.m, "notes of written conditions once the cache shows them")
}
