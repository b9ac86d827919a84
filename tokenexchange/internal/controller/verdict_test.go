package controller_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

// TestGitOpsVerdicts drives TokenExchanges into every state the controller reports and checks what
// kstatus (Flux, kubectl-wait tooling) and the shipped Argo CD health script conclude from the
// object read back from the API server: InProgress right after create, while the target is missing
// and for a spec not observed yet; Current when Ready; Failed for every terminal reason.
func TestGitOpsVerdicts(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)

	// Right after create, before the controller has seen it: the CRD defaults status to
	// observedGeneration 0 (the create response is the object as stored).
	fresh := txUnstructured(t, tokenExchange(ns, "fresh", "fresh-target"))
	delete(fresh.Object, "status")
	must(t, k8s.Create(ctx, fresh))
	observed, found, _ := unstructured.NestedInt64(fresh.Object, "status", "observedGeneration")
	assert.True(t, found, "status.observedGeneration defaulted: %v", fresh.Object["status"])
	assert.Equal(t, int64(0), observed)
	checkVerdict(t, fresh, kstatus.InProgressStatus, "Progressing", "right after create")

	for name, injected := range map[string]bool{"injected": true, "injected-too": true, "plain": false, "taken": true, "checked": true, "refused": true} {
		must(t, k8s.Create(ctx, deployment(ns, name, 1, injected)))
	}
	must(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-token-exchange"}}))
	must(t, k8s.Create(ctx, tokenExchange(ns, "in-effect", "injected")))
	waitCondition(t, ns, "in-effect", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	tests := []struct {
		name    string
		create  func(name string)
		reason  string
		verdict kstatus.Status
		argo    string
	}{{
		name:   "configured",
		create: func(name string) { must(t, k8s.Create(ctx, tokenExchange(ns, name, "injected-too"))) },
		reason: v1alpha1.ReasonConfigured, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name:   "target not found",
		create: func(name string) { must(t, k8s.Create(ctx, tokenExchange(ns, name, "missing"))) },
		reason: duck.ReasonTargetNotFound, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name:   "workload not injected",
		create: func(name string) { must(t, k8s.Create(ctx, tokenExchange(ns, name, "plain"))) },
		reason: v1alpha1.ReasonNotInjected, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "unsupported kind",
		create: func(name string) {
			te := tokenExchange(ns, name, "w")
			te.Spec.TargetRef = duck.TargetRef{APIVersion: "example.com/v1", Kind: "Widget", Name: "w"}
			must(t, k8s.Create(ctx, te))
		},
		reason: duck.ReasonUnsupportedKind, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:   "conflict with an older TokenExchange",
		create: func(name string) { must(t, k8s.Create(ctx, tokenExchange(ns, name, "injected"))) },
		reason: v1alpha1.ReasonConflict, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:   "ConfigMap not owned",
		create: func(name string) { must(t, k8s.Create(ctx, tokenExchange(ns, name, "taken"))) },
		reason: v1alpha1.ReasonConfigMapNotOwned, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "invalid spec stored under an older CRD",
		create: func(name string) {
			te := tokenExchange(ns, name, "checked")
			te.Labels = map[string]string{SkipWebhookLabel: "true"}
			te.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: "agent-{{.Secret}}"}}
			createWithoutTemplateRule(t, te)
		},
		reason: v1alpha1.ReasonInvalidSpec, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "client owned by another workload",
		create: func(name string) {
			must(t, k8s.Create(ctx, tokenExchange(ns, name, "refused")))
			waitCondition(t, ns, name, v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
			pod := runRolePodRefusing(t, combinedPod(ns, "refused-0", "refused", "register", "inbound", "outbound"),
				[]string{contract.ComponentSpiffeHelper, contract.ContainerAuthbridge},
				&sidecar.Refusal{Reason: sidecar.ReasonClientOwnedElsewhere, Message: `client "x" belongs to workload team-b/x`})
			pod.sync(t, ns, "refused-token-exchange")
		},
		reason: v1alpha1.ReasonClientOwnedElsewhere, verdict: kstatus.FailedStatus, argo: "Degraded",
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("state-%d", i)
			tt.create(name)
			ready := metav1.ConditionFalse
			if tt.verdict == kstatus.CurrentStatus {
				ready = metav1.ConditionTrue
			}
			got := waitCondition(t, ns, name, v1alpha1.ConditionReady, ready, tt.reason)
			readyCond := got.Status.Condition(v1alpha1.ConditionReady)
			reconciling, stalled := got.Status.Condition(duck.ConditionReconciling), got.Status.Condition(duck.ConditionStalled)
			switch tt.verdict {
			case kstatus.InProgressStatus:
				require.NotNil(t, reconciling, "Reconciling")
				assert.Equal(t, tt.reason, reconciling.Reason)
				assert.Nil(t, stalled)
			case kstatus.FailedStatus:
				require.NotNil(t, stalled, "Stalled")
				assert.Equal(t, tt.reason, stalled.Reason)
				assert.Equal(t, readyCond.Message, stalled.Message)
				assert.Nil(t, reconciling)
			default:
				assert.Nil(t, reconciling)
				assert.Nil(t, stalled)
			}
			assertVerdict(t, ns, name, tt.verdict, tt.argo, tt.name)
		})
	}

	// A spec change the controller has not observed yet reads as in progress again, even on a
	// TokenExchange that was Ready (the update response is the object as stored).
	te := getTX(ctx, t, ns, "in-effect")
	require.True(t, te.Status.IsReady())
	te.Spec.Spiffe = &v1alpha1.SpiffeSpec{TrustDomain: "other.example"}
	u := txUnstructured(t, te)
	must(t, k8s.Update(ctx, u))
	checkVerdict(t, u, kstatus.InProgressStatus, "Progressing", "new generation")
	waitCondition(t, ns, "in-effect", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	assertVerdict(t, ns, "in-effect", kstatus.CurrentStatus, "Healthy", "new generation observed")
}

func txUnstructured(t *testing.T, te *v1alpha1.TokenExchange) *unstructured.Unstructured {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(te)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: raw}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TokenExchange"))
	return u
}

// assertVerdict reads the TokenExchange back as GitOps tools do (unstructured) and checks their
// verdicts.
func assertVerdict(t *testing.T, ns, name string, want kstatus.Status, argo, state string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TokenExchange"))
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u))
	checkVerdict(t, u, want, argo, state)
}

// checkVerdict checks what kstatus and the shipped Argo CD health script conclude from u.
func checkVerdict(t *testing.T, u *unstructured.Unstructured, want kstatus.Status, argo, state string) {
	t.Helper()
	ducktest.AssertVerdict(t, u, want, argo, state)
}
