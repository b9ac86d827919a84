package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/cardsync"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestKstatusVerdicts drives AgentCards into every state the controller reports and checks what
// kstatus (Flux, kubectl-wait tooling) and the shipped Argo CD health script conclude from the
// object read back from the API server: InProgress right after create and while the card gets
// there by itself, Current when Ready, Failed for every terminal reason.
func TestKstatusVerdicts(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()

	// Right after create, before the controller has synced it: the CRD defaults status to
	// observedGeneration 0 (the create response is the object as stored).
	raw, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(selectorCard(ns, "fresh", map[string]string{"app": "fresh"}))
	require.NoError(t, err)
	fresh := &unstructured.Unstructured{Object: raw}
	fresh.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentCard"))
	delete(fresh.Object, "status")
	require.NoError(t, k8s.Create(ctx, fresh))
	observed, found, _ := unstructured.NestedInt64(fresh.Object, "status", "observedGeneration")
	assert.True(t, found, "status.observedGeneration defaulted: %v", fresh.Object["status"])
	assert.Equal(t, int64(0), observed)
	checkVerdict(t, fresh, kstatus.InProgressStatus, "Progressing", "right after create")

	own := func(sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }
	required := func(c *v1alpha1.AgentCard) { c.Spec.RequireSignature = ptr(true) }
	// served creates a pod at ip serving body, and an AgentCard selecting it.
	served := func(name, ip string, body []byte, mutate ...func(*v1alpha1.AgentCard)) {
		labels := map[string]string{"app": name}
		if body != nil {
			serveCard(t, ip, body)
		}
		makePod(t, ns, name, ip, name, labels)
		require.NoError(t, k8s.Create(ctx, selectorCard(ns, name, labels, mutate...)))
	}
	tests := []struct {
		name    string
		drive   func(name string) // creates the AgentCard (and what it selects) in the state
		reason  string            // Ready's reason in that state
		verdict kstatus.Status
		argo    string
	}{{
		name:   "card available",
		drive:  func(n string) { served(n, "127.45.1.1", signedCard(t, ca, own(n), "1.0.0")) },
		reason: v1alpha1.ReasonCardAvailable, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name:   "unsigned card, signature not required",
		drive:  func(n string) { served(n, "127.45.1.2", testcards.Weather("1.0.0")) },
		reason: v1alpha1.ReasonCardAvailable, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name: "no pod selected yet",
		drive: func(n string) {
			require.NoError(t, k8s.Create(ctx, selectorCard(ns, n, map[string]string{"app": "nobody"})))
		},
		reason: v1alpha1.ReasonNoReadyPods, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name: "workload not created yet",
		drive: func(n string) {
			require.NoError(t, k8s.Create(ctx, &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n},
				Spec: v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{Kind: "Deployment", Name: "later"}}}))
		},
		reason: duck.ReasonTargetNotFound, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name:   "pod not answering",
		drive:  func(n string) { served(n, "127.45.1.3", nil) },
		reason: v1alpha1.ReasonNoValidCard, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name:   "signature required, card unsigned",
		drive:  func(n string) { served(n, "127.45.1.4", testcards.Weather("1.0.0"), required) },
		reason: v1alpha1.ReasonSignatureRequired, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:   "signature required, signer is another identity",
		drive:  func(n string) { served(n, "127.45.1.5", signedCard(t, ca, own("someone-else"), "1.0.0"), required) },
		reason: v1alpha1.ReasonIdentityNotBound, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "signature required, identity of another namespace not allowed",
		drive: func(n string) {
			other := "spiffe://cluster.local/ns/elsewhere/sa/" + n
			served(n, "127.45.1.6", signedCard(t, ca, other, "1.0.0"), required, func(c *v1alpha1.AgentCard) {
				c.Spec.IdentityBinding = &v1alpha1.IdentityBinding{SpiffeID: other}
			})
		},
		reason: v1alpha1.ReasonIdentityNotBound, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:   "invalid card",
		drive:  func(n string) { served(n, "127.45.1.7", []byte(`{"name": "no-version"}`)) },
		reason: v1alpha1.ReasonInvalidCard, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:   "card too large",
		drive:  func(n string) { served(n, "127.45.1.8", hugeCard(t, cardsync.MaxStatusCardBytes+1024)) },
		reason: v1alpha1.ReasonCardTooLarge, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "empty selector",
		drive: func(n string) {
			require.NoError(t, k8s.Create(ctx, selectorCard(ns, n, nil)))
		},
		reason: v1alpha1.ReasonInvalidSelector, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "targetRef kind not served",
		drive: func(n string) {
			require.NoError(t, k8s.Create(ctx, &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n},
				Spec: v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{APIVersion: "example.com/v1", Kind: "Widget", Name: "w"}}}))
		},
		reason: duck.ReasonUnsupportedKind, verdict: kstatus.FailedStatus, argo: "Degraded",
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("state-%d", i)
			tt.drive(name)
			var got *v1alpha1.AgentCard
			eventually(t, 30*time.Second, func() string {
				got = getCard(t, ns, name)
				if r := got.Status.Condition(v1alpha1.ConditionReady); r == nil || r.Reason != tt.reason || r.ObservedGeneration != got.Generation {
					return fmt.Sprintf("Ready=%s, want reason %s", cond(got, v1alpha1.ConditionReady), tt.reason)
				}
				return ""
			})
			assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
			ready := got.Status.Condition(v1alpha1.ConditionReady)
			reconciling, stalled := got.Status.Condition(duck.ConditionReconciling), got.Status.Condition(duck.ConditionStalled)
			switch tt.verdict {
			case kstatus.InProgressStatus:
				require.NotNil(t, reconciling, "Reconciling")
				assert.Equal(t, tt.reason, reconciling.Reason)
				assert.Nil(t, stalled)
			case kstatus.FailedStatus:
				require.NotNil(t, stalled, "Stalled")
				assert.Equal(t, tt.reason, stalled.Reason)
				assert.Equal(t, ready.Message, stalled.Message)
				assert.Nil(t, reconciling)
			default:
				assert.Equal(t, metav1.ConditionTrue, ready.Status)
				assert.Nil(t, reconciling)
				assert.Nil(t, stalled)
			}
			assertVerdict(t, ns, name, tt.verdict, tt.argo, tt.name)
		})
	}

	// The workload appears: the card that waited for it goes on by itself (no longer TargetNotFound).
	dep := &appsv1.Deployment{}
	dep.Namespace, dep.Name = ns, "later"
	dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "later"}}
	dep.Spec.Template.Labels = map[string]string{"app": "later"}
	dep.Spec.Template.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent:1"}}
	require.NoError(t, k8s.Create(ctx, dep))
	eventually(t, 30*time.Second, func() string {
		if r := cond(getCard(t, ns, "state-3"), v1alpha1.ConditionReady); r != "False/"+v1alpha1.ReasonNoReadyPods {
			return "Ready=" + r
		}
		return ""
	})
	assertVerdict(t, ns, "state-3", kstatus.InProgressStatus, "Progressing", "workload created, no pod yet")

	// A spec change the controller has not observed yet reads as in progress again, even on a card
	// that was Ready (the update response is the object as stored).
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentCard"))
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "state-0"}, u))
	require.NoError(t, unstructured.SetNestedField(u.Object, "10s", "spec", "syncPeriod"))
	require.NoError(t, k8s.Update(ctx, u))
	checkVerdict(t, u, kstatus.InProgressStatus, "Progressing", "new generation")
}

// assertVerdict reads the AgentCard back as GitOps tools do (unstructured) and checks their verdicts.
func assertVerdict(t *testing.T, ns, name string, want kstatus.Status, argo, state string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentCard"))
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u))
	checkVerdict(t, u, want, argo, state)
}

// checkVerdict checks what kstatus and the shipped Argo CD health script conclude from u.
func checkVerdict(t *testing.T, u *unstructured.Unstructured, want kstatus.Status, argo, state string) {
	t.Helper()
	ducktest.AssertVerdict(t, u, want, argo, state)
}
