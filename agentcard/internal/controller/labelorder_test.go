package controller

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
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
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/pkg/duck"
)

// The order of one sync's API writes (a unit test of Reconcile on an intercepting fake client: the
// envtest suite proves the verdicts, this the order): a pod with a negative verdict that may carry
// true is labelled false before the status write; one without the label is labelled false while
// the status is written, not before it, so that a first sync costs one API round trip, not two.
func TestUnlabelledPodsAreLabelledAlongsideTheStatusWrite(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(testcards.Weather("1.0.0")) // unsigned: a negative verdict
	}))
	t.Cleanup(srv.Close)
	_, portStr, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)

	labels := map[string]string{"app": "order"}
	fullPod := func(name string, extra map[string]string) *corev1.Pod {
		l := map[string]string{"app": "order"}
		for k, v := range extra {
			l[k] = v
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Labels: l},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	card := &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "order", Generation: 1},
		Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Endpoint: &v1alpha1.Endpoint{Port: int32(port)}},
	}

	unlabelled, labelledTrue := fullPod("unlabelled", nil), fullPod("labelled-true", map[string]string{v1alpha1.LabelSignatureVerified: "true"})
	pods := startedPodInformers(t, unlabelled.DeepCopy(), labelledTrue.DeepCopy())

	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	statusStarted := make(chan struct{})
	var startOnce sync.Once
	serial := false
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(unlabelled, labelledTrue, card).
		WithStatusSubresource(&v1alpha1.AgentCard{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if obj.GetName() == "unlabelled" {
					// Waits for the status write to start: it never does while this patch is
					// waited for before it.
					select {
					case <-statusStarted:
					case <-time.After(5 * time.Second):
						mu.Lock()
						serial = true
						mu.Unlock()
					}
				}
				record("label " + obj.GetName())
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				record("status")
				startOnce.Do(func() { close(statusStarted) })
				return nil // the order is under test, not the apply
			},
		}).Build()
	r := &CardReconciler{
		Client:   c,
		Pods:     pods,
		Fetcher:  fetch.New(4, 5*time.Second),
		Trust:    &TrustStore{},
		Status:   &duck.StatusApplier{Client: c, FieldOwner: FieldManager, Conditions: resources.CardConditions},
		Verified: newVerifiedPods(),
		cards:    newCardStore(DefaultMaxCachedCardBytes),
	}
	_, err = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(card)})
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	assert.False(t, serial, "the unlabelled pod's label was written before the status, not alongside it")
	require.Contains(t, order, "status")
	assert.Less(t, indexOf(order, "label labelled-true"), indexOf(order, "status"), "a pod that may carry true is revoked before the status write: %v", order)
	assert.Contains(t, order, "label unlabelled")
	for _, name := range []string{"unlabelled", "labelled-true"} {
		var p corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &p))
		assert.Equal(t, "false", p.Labels[v1alpha1.LabelSignatureVerified], name)
	}
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
func startedPodInformers(t *testing.T, pods ...*corev1.Pod) *duck.SlimPods[*pod] {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	pi := newPodCache(k8sfake.NewClientset(objs...), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() { _ = pi.Start(ctx) }()
	require.NoError(t, pi.WaitForSync(ctx))
	return pi
}
