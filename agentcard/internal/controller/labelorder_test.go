package controller

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/cardsync"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/podlabels"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/agentcard/internal/verify"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// The label one sync writes, and when (a unit test of Reconcile on an intercepting fake client:
// the envtest suite proves the verdicts end to end, this the writes and their order). A pod that
// may carry true and whose verdict is not positive loses true before the status write; every other
// label change goes out while the status is written, not before it, so that a first sync costs one
// API round trip, not two. A card with nothing to verify (unsigned, no signature required) leaves
// an unlabelled pod alone: no write at all.
func TestSyncLabelsAndTheirOrder(t *testing.T) {
	ca, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(t, err)
	svid, err := ca.NewSVID("spiffe://cluster.local/ns/ns/sa/order", devca.SVIDOptions{})
	require.NoError(t, err)
	// The controller under test has no trust bundle: a signed card fails verification (NoTrustBundle).
	signed, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: svid.Key, Chain: svid.Chain})
	require.NoError(t, err)

	const absent = "<absent>"
	for _, tc := range []struct {
		name       string
		body       []byte
		requireSig bool
		// want is each pod's label after the sync, by the pod's label before it.
		want map[string]string
		// revoked are the pods whose label is written before the status; the others' go out alongside it.
		revoked []string
		// untouched are the pods no label patch is sent for.
		untouched []string
	}{{
		name: "unsigned card: nothing to verify",
		body: testcards.Weather("1.0.0"),
		want: map[string]string{absent: absent, "false": absent, "true": absent},
		// true is taken away before the status write; the pod labelled false by an earlier
		// verification loses it alongside; the unlabelled pod is not written to.
		revoked: []string{"true"}, untouched: []string{absent},
	}, {
		name: "unsigned card, signature required", body: testcards.Weather("1.0.0"), requireSig: true,
		want:    map[string]string{absent: "false", "false": "false", "true": "false"},
		revoked: []string{"true"}, untouched: []string{"false"},
	}, {
		name:    "signed card that does not verify",
		body:    signed,
		want:    map[string]string{absent: "false", "false": "false", "true": "false"},
		revoked: []string{"true"}, untouched: []string{"false"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			order, labels := syncOnce(t, tc.body, tc.requireSig)
			require.Contains(t, order, "status")
			for before, after := range tc.want {
				pod := podLabelled(before)
				assert.Equal(t, after, labels[pod], "the pod labelled %s before the sync", before)
				switch {
				case slices.Contains(tc.untouched, before):
					assert.NotContains(t, order, "label "+pod, "no label write for the pod labelled %s: %v", before, order)
				case slices.Contains(tc.revoked, before):
					assert.Less(t, indexOf(order, "label "+pod), indexOf(order, "status"), "a pod that may carry true loses it before the status write: %v", order)
				default:
					assert.Contains(t, order, "label "+pod)
					assert.Greater(t, indexOf(order, "label "+pod), indexOf(order, "status"),
						"the pod labelled %s is relabelled alongside the status write (after it started), not before it: %v", before, order)
				}
			}
		})
	}
}

// podLabelled names the test pod carrying kagenti.io/signature-verified=value ("<absent>": none).
func podLabelled(value string) string {
	if value == "<absent>" {
		return "unlabelled"
	}
	return "labelled-" + value
}

// syncOnce runs one Reconcile of an AgentCard selecting three pods serving body (unlabelled,
// labelled false, labelled true) and returns the order of its writes ("status", "label <pod>";
// a label patch that is not a revocation waits for the status write to start, so it can only be
// recorded after it when both go out together) and each pod's label afterwards.
func syncOnce(t *testing.T, body []byte, requireSig bool) ([]string, map[string]string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	_, portStr, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)

	selector := map[string]string{"app": "order"}
	fullPod := func(label string) *corev1.Pod {
		l := map[string]string{"app": "order"}
		if label != "<absent>" {
			l[v1alpha1.LabelSignatureVerified] = label
		}
		name := podLabelled(label)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Labels: l},
			Spec:       corev1.PodSpec{ServiceAccountName: "order"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	card := &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "order", Generation: 1},
		Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: selector},
			Endpoint: &v1alpha1.Endpoint{Port: int32(port)}, RequireSignature: &requireSig},
	}
	pods := []*corev1.Pod{fullPod("<absent>"), fullPod("false"), fullPod("true")}
	informed := startedPodInformers(t, pods[0].DeepCopy(), pods[1].DeepCopy(), pods[2].DeepCopy())

	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	statusStarted := make(chan struct{})
	var startOnce sync.Once
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(pods[0], pods[1], pods[2], card).
		WithStatusSubresource(&v1alpha1.AgentCard{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if obj.GetName() != podLabelled("true") {
					// Waits for the status write to start: it never does while this patch is
					// waited for before it (then the patch is recorded first, after 5 s).
					select {
					case <-statusStarted:
					case <-time.After(5 * time.Second):
					}
				}
				record("label " + obj.GetName())
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				// Recorded before the status write is let start: the relabelling waits for it.
				record("status")
				startOnce.Do(func() { close(statusStarted) })
				return nil // the writes are under test, not the apply
			},
		}).Build()
	r := &CardReconciler{
		Client: c,
		Pods:   informed,
		Cards:  cardsync.NewSyncer(fetch.New(4, 5*time.Second), &verify.TrustStore{}, signature.IdentityRules{}, "", DefaultMaxCachedCardBytes),
		Status: &duck.StatusApplier{Client: c, FieldOwner: FieldManager, Conditions: status.CardConditions},
		Labels: &podlabels.Labeller{Client: c, Pods: informed, Granted: podlabels.NewGrants()},
	}
	_, err = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(card)})
	require.NoError(t, err)

	labels := map[string]string{}
	for _, p := range pods {
		var got corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(p), &got))
		v, ok := got.Labels[v1alpha1.LabelSignatureVerified]
		if !ok {
			v = "<absent>"
		}
		labels[p.Name] = v
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(order), labels
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// startedPodInformers are agentcard's pod informers over a fake clientset holding pods, started and synced for
// the test (a unit test of Reconcile: the envtest suite runs them on a real API server).
func startedPodInformers(t *testing.T, pods ...*corev1.Pod) *kit.SlimPods[*podcache.Pod] {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	pi := podcache.New(k8sfake.NewClientset(objs...), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() { _ = pi.Start(ctx) }()
	require.NoError(t, pi.WaitForSync(ctx))
	return pi
}
