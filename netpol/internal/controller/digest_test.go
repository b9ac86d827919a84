package controller

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
)

// TestPolicySpecDigest: a digested policy compares like the full one, by spec only; the digest
// annotation never leaves the process.
func TestPolicySpecDigest(t *testing.T) {
	card := &view.AgentCard{Name: "weather-card", Namespace: "team", UID: "u-1"}
	want := resources.MakeNetworkPolicy(card, metav1.LabelSelector{MatchLabels: map[string]string{"app": "weather"}}, resources.DefaultOptions())
	stored := want.DeepCopy()
	stored.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kagenti-netpol"}}

	obj, err := digestPolicySpec(stored.DeepCopy())
	require.NoError(t, err)
	cached := obj.(*networkingv1.NetworkPolicy)
	assert.Equal(t, networkingv1.NetworkPolicySpec{}, cached.Spec, "the spec is not cached")
	assert.Empty(t, cached.ManagedFields)
	assert.Equal(t, stored.Labels, cached.Labels)
	assert.Equal(t, stored.Annotations[resources.PolicyKindAnnotation], cached.Annotations[resources.PolicyKindAnnotation])

	assert.True(t, policyContent.UpToDate(cached, want), "digested, same spec")
	assert.True(t, policyContent.UpToDate(stored, want), "full, same spec")
	edited := stored.DeepCopy()
	edited.Spec.Egress = nil
	obj, err = digestPolicySpec(edited.DeepCopy())
	require.NoError(t, err)
	assert.False(t, policyContent.UpToDate(obj.(*networkingv1.NetworkPolicy), want), "digested, edited spec")
	assert.False(t, policyContent.UpToDate(edited, want), "full, edited spec")
	// A nil and an empty list are the same spec, as for equality.Semantic.
	empty := want.DeepCopy()
	empty.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{}
	assert.True(t, policyContent.UpToDate(empty, want))

	policyContent.Copy(cached, want)
	assert.Equal(t, want.Spec, cached.Spec)
	assert.NotContains(t, cached.Annotations, specDigestAnnotation, "written objects carry no digest")
}

// TestPolicyCacheHoldsSpecDigests: the manager's cache holds netpol's policies with their specs
// digested; an unchanged policy is not written again, a hand edit is undone, and the stored policy
// never carries the digest annotation.
func TestPolicyCacheHoldsSpecDigests(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	deployment(t, k8s, ns, "digested")
	agentCard(t, k8s, ns, "digested-card", targetSpec("Deployment", "digested"))
	mgr := newManager(t, restConfig)
	require.NoError(t, indexFields(ctx, mgr))
	startManager(t, mgr)
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))

	cached, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true}})
	require.NoError(t, err)
	var policyWrites atomic.Int64
	c := interceptor.NewClient(cached, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*networkingv1.NetworkPolicy); ok {
				policyWrites.Add(1)
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*networkingv1.NetworkPolicy); ok {
				policyWrites.Add(1)
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	r := newReconciler(mgr, c, DefaultOptions())
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "digested-card"}}
	key := types.NamespacedName{Namespace: ns, Name: "digested-agent-policy"}
	reconcile := func() {
		t.Helper()
		_, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
	}
	cachedDigest := func() string {
		np := &networkingv1.NetworkPolicy{}
		if err := mgr.GetCache().Get(ctx, key, np); err != nil {
			return ""
		}
		assert.Equal(t, networkingv1.NetworkPolicySpec{}, np.Spec, "the cache holds no spec")
		return np.Annotations[specDigestAnnotation]
	}
	storedPolicy := func() *networkingv1.NetworkPolicy {
		t.Helper()
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, k8s.Get(ctx, key, np))
		assert.NotContains(t, np.Annotations, specDigestAnnotation, "the digest is never written")
		return np
	}

	reconcile()
	require.Equal(t, int64(1), policyWrites.Load(), "created")
	stored := storedPolicy()
	eventually(t, "the policy's digest in the cache", func() (bool, string) {
		return cachedDigest() == specDigest(&stored.Spec), "cached digest " + cachedDigest()
	})
	reconcile()
	assert.Equal(t, int64(1), policyWrites.Load(), "an unchanged policy is not written again")

	// A hand edit: the cache gets the new digest, the reconcile restores the spec.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		np := storedPolicy()
		np.Spec.Egress = nil
		return k8s.Update(ctx, np)
	}))
	edited := storedPolicy()
	eventually(t, "the edited policy's digest in the cache", func() (bool, string) {
		return cachedDigest() == specDigest(&edited.Spec), "cached digest " + cachedDigest()
	})
	reconcile()
	assert.Equal(t, int64(2), policyWrites.Load(), "the hand edit undone")
	assert.Equal(t, stored.Spec, storedPolicy().Spec)
}
