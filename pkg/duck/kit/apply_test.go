package kit

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// countingClient counts the writes that reach the API server.
func countingClient(t *testing.T) (client.Client, *int) {
	writes := 0
	var mu sync.Mutex
	wrapped, err := client.NewWithWatch(testCfg, client.Options{Scheme: testScheme})
	require.NoError(t, err)
	counted := interceptor.NewClient(wrapped, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			mu.Lock()
			writes++
			mu.Unlock()
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			mu.Lock()
			writes++
			mu.Unlock()
			return c.Update(ctx, obj, opts...)
		},
	})
	return counted, &writes
}

// owner is any object with a UID; a real Secret stands in for a custom resource.
func owner(t *testing.T, c client.Client, ns, name string) client.Object {
	o := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	require.NoError(t, c.Create(context.Background(), o))
	return o
}

func desired(ns string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agent-trace", Namespace: ns,
		Labels: map[string]string{"app": "agent"}}, Data: data}
}

func TestApplyWritesOnlyOnChange(t *testing.T) {
	c, writes := countingClient(t)
	ctx := context.Background()
	ns := uniqueNamespace("apply")
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	own := owner(t, c, ns, "owner")
	a := &Applier{Client: c, Scheme: testScheme, ManagedBy: "kagenti-test"}
	*writes = 0

	res, err := a.Apply(ctx, desired(ns, map[string]string{"otel_endpoint": "collector:4317"}), own)
	require.NoError(t, err)
	assert.Equal(t, Created, res)

	var got corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent-trace"}, &got))
	assert.Equal(t, "kagenti-test", got.Labels[contract.ManagedByLabel])
	assert.Equal(t, "agent", got.Labels["app"])
	assert.Equal(t, ContentHash(&got), got.Annotations[contract.ContentHashAnnotation])
	require.Len(t, got.OwnerReferences, 1)
	assert.Equal(t, own.GetUID(), got.OwnerReferences[0].UID)
	assert.True(t, *got.OwnerReferences[0].Controller)

	for i := 0; i < 5; i++ {
		res, err = a.Apply(ctx, desired(ns, map[string]string{"otel_endpoint": "collector:4317"}), own)
		require.NoError(t, err)
		assert.Equal(t, Unchanged, res)
	}
	assert.Equal(t, 1, *writes, "one create; unchanged content costs no write")

	res, err = a.Apply(ctx, desired(ns, map[string]string{"otel_endpoint": "collector:4318"}), own)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent-trace"}, &got))
	assert.Equal(t, "collector:4318", got.Data["otel_endpoint"])

	// Someone edits the data by hand: the next Apply repairs it even though the hash annotation
	// still claims the old content.
	got.Data["otel_endpoint"] = "tampered"
	require.NoError(t, c.Update(ctx, &got))
	res, err = a.Apply(ctx, desired(ns, map[string]string{"otel_endpoint": "collector:4318"}), own)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
}

func TestApplyRefusesForeignConfigMaps(t *testing.T) {
	c, _ := countingClient(t)
	ctx := context.Background()
	ns := uniqueNamespace("foreign")
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	a := &Applier{Client: c, Scheme: testScheme, ManagedBy: "kagenti-test"}

	// A user's own ConfigMap with the derived name is never overwritten.
	user := desired(ns, map[string]string{"mine": "yes"})
	require.NoError(t, c.Create(ctx, user))
	_, err := a.Apply(ctx, desired(ns, map[string]string{"k": "v"}), owner(t, c, ns, "one"))
	var notOwned *NotOwnedError
	require.True(t, errors.As(err, &notOwned), "%v", err)
	assert.Contains(t, err.Error(), `ConfigMap "agent-trace" exists and is not managed by this controller`)

	// Nor is one controlled by another owner.
	require.NoError(t, c.Delete(ctx, user))
	_, err = a.Apply(ctx, desired(ns, map[string]string{"k": "v"}), owner(t, c, ns, "first"))
	require.NoError(t, err)
	_, err = a.Apply(ctx, desired(ns, map[string]string{"k": "other"}), owner(t, c, ns, "second"))
	require.True(t, errors.As(err, &notOwned), "%v", err)
	assert.Contains(t, err.Error(), "controlled by Secret first")
}

func TestApplyConcurrentWritersConverge(t *testing.T) {
	c, _ := countingClient(t)
	ctx := context.Background()
	ns := uniqueNamespace("concurrent")
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	own := owner(t, c, ns, "owner")
	a := &Applier{Client: c, Scheme: testScheme, ManagedBy: "kagenti-test"}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := a.Apply(ctx, desired(ns, map[string]string{"k": "v"}), own)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "conflicts between writers are retried, never surfaced")
	}
	var got corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent-trace"}, &got))
	assert.Equal(t, "v", got.Data["k"])
}

func TestContentHashIgnoresMapOrderButNotContent(t *testing.T) {
	a := &corev1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}}
	b := &corev1.ConfigMap{Data: map[string]string{"b": "2", "a": "1"}}
	assert.Equal(t, ContentHash(a), ContentHash(b))
	// Moving a character between key and value changes the hash (keys and values are length-prefixed).
	assert.NotEqual(t, ContentHash(&corev1.ConfigMap{Data: map[string]string{"ab": "c"}}),
		ContentHash(&corev1.ConfigMap{Data: map[string]string{"a": "bc"}}))
	assert.NotEqual(t, ContentHash(&corev1.ConfigMap{Data: map[string]string{"k": "v"}}),
		ContentHash(&corev1.ConfigMap{BinaryData: map[string][]byte{"k": []byte("v")}}))
}

// TestApplyAsksTheAPIServerWhatTheCacheDoesNotShow: a cache filtered by label (as netpol's is)
// never shows an object someone else made; creating it fails, and the Applier must then decide
// ownership on the stored object (a NotOwnedError naming its kind), not retry blindly.
func TestApplyAsksTheAPIServerWhatTheCacheDoesNotShow(t *testing.T) {
	ctx := context.Background()
	direct, _ := countingClient(t)
	ns := uniqueNamespace("apply-filtered")
	require.NoError(t, direct.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	blind := interceptor.NewClient(direct.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
		},
	})
	foreign := desired(ns, map[string]string{"k": "theirs"})
	require.NoError(t, direct.Create(ctx, foreign.DeepCopy()))

	a := &Applier{Client: blind, APIReader: direct, Scheme: testScheme, ManagedBy: "kagenti-test"}
	_, err := a.Apply(ctx, desired(ns, map[string]string{"k": "ours"}), owner(t, direct, ns, "owner"))
	var notOwned *NotOwnedError
	require.ErrorAs(t, err, &notOwned)
	assert.Equal(t, "ConfigMap", notOwned.Kind)
	assert.Contains(t, err.Error(), `ConfigMap "agent-trace" exists and is not managed by this controller`)

	var have corev1.ConfigMap
	require.NoError(t, direct.Get(ctx, client.ObjectKeyFromObject(foreign), &have))
	assert.Equal(t, "theirs", have.Data["k"], "left alone")
}

// TestApplyObjectNetworkPolicy: the same rules for another kind, owned by an unstructured custom
// resource (netpol owns its policies by AgentCards it reads unstructured).
func TestApplyObjectNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	c, writes := countingClient(t)
	ns := uniqueNamespace("apply-netpol")
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	*writes = 0
	card := &unstructured.Unstructured{}
	card.SetGroupVersionKind(schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentCard"})
	card.SetName("card")
	card.SetNamespace(ns)
	card.SetUID("5c0e7a3e-0000-4000-8000-000000000001")
	policy := func(port int32) *networkingv1.NetworkPolicy {
		p, tcp := intstr.FromInt32(port), corev1.ProtocolTCP
		// As the API server defaults them: the comparison is of the spec as stored.
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "web-agent-policy", Namespace: ns, Annotations: map[string]string{"kagenti.io/policy": "restrictive"}},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}}},
			},
		}
	}
	content := Content[*networkingv1.NetworkPolicy]{
		UpToDate: func(have, want *networkingv1.NetworkPolicy) bool {
			return equality.Semantic.DeepEqual(have.Spec, want.Spec)
		},
		Copy: func(dst, src *networkingv1.NetworkPolicy) { dst.Spec = src.Spec },
	}
	a := &Applier{Client: c, Scheme: testScheme, ManagedBy: "kagenti-netpol"}

	res, err := ApplyObject(ctx, a, policy(8080), card, content)
	require.NoError(t, err)
	assert.Equal(t, Created, res)
	res, err = ApplyObject(ctx, a, policy(8080), card, content)
	require.NoError(t, err)
	assert.Equal(t, Unchanged, res)
	res, err = ApplyObject(ctx, a, policy(9090), card, content)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
	assert.Equal(t, 2, *writes)

	var have networkingv1.NetworkPolicy
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-agent-policy"}, &have))
	assert.Equal(t, int32(9090), have.Spec.Ingress[0].Ports[0].Port.IntVal)
	assert.Equal(t, "kagenti-netpol", have.Labels[contract.ManagedByLabel])
	ref := metav1.GetControllerOf(&have)
	require.NotNil(t, ref)
	assert.Equal(t, "AgentCard", ref.Kind)

	other := card.DeepCopy()
	other.SetUID("5c0e7a3e-0000-4000-8000-000000000002")
	other.SetName("other")
	_, err = ApplyObject(ctx, a, policy(8080), other, content)
	var notOwned *NotOwnedError
	require.ErrorAs(t, err, &notOwned)
	assert.Equal(t, "NetworkPolicy", notOwned.Kind)
	assert.Contains(t, err.Error(), "controlled by AgentCard card")
}

// uniqueNamespace names a test's namespace: a test may run more than once against the same API
// server (-count, -cpu 1,4).
func uniqueNamespace(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:8])
}
