package controller_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// policy is an authorization policy whose third rule (index 2) does not compile: the CRD schema
// accepts it (it cannot read CEL), the webhook compiles it as the proxy would.
func policy() *v1alpha1.AuthorizationSpec {
	return &v1alpha1.AuthorizationSpec{Rules: []v1alpha1.AuthorizationRule{
		{Name: "no-guests", Effect: v1alpha1.EffectDeny, When: `"/guests" in groups`},
		{Name: "only-middle", Effect: v1alpha1.EffectAllow, When: `caller == "spiffe://cluster.local/ns/agents/sa/middle"`},
		{Name: "read-only", Effect: v1alpha1.EffectAllow, When: `request.rpcMethod in ["tasks/get"] &&`},
	}}
}

// TestWebhookRefusesAPolicyThatDoesNotCompile: on a real API server, a TokenExchange whose policy
// does not compile is refused at admission with the rule's index, field and name.
func TestWebhookRefusesAPolicyThatDoesNotCompile(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	te := tokenExchange(ns, "tx", "agent")
	te.Spec.Inbound = &v1alpha1.InboundSpec{Authorization: policy()}
	err := k8s.Create(ctx, te.DeepCopy())
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	t.Logf("denial: %v", err)
	assert.Contains(t, err.Error(), `admission webhook "tokenexchange.kagenti.io" denied the request`)
	assert.Contains(t, err.Error(), `spec.inbound.authorization.rules[2].when: Invalid value: "request.rpcMethod in [\"tasks/get\"] &&": rule "read-only" does not compile: 1:38: Syntax error`)

	te.Spec.Inbound.Authorization.Rules[2].When = `request.rpcMethod in ["tasks/get"]`
	require.NoError(t, k8s.Create(ctx, te, client.DryRunAll), "the corrected policy is admitted")
}

// TestStoredPolicyThatDoesNotCompileIsInvalidSpec: where the webhook did not run (failurePolicy
// Ignore while the controller is down), the reconciler refuses the policy with the same message
// and writes no ConfigMap, so no proxy is handed it.
func TestStoredPolicyThatDoesNotCompileIsInvalidSpec(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	te := tokenExchange(ns, "tx", "agent")
	te.Labels = map[string]string{SkipWebhookLabel: "true"}
	te.Spec.Inbound = &v1alpha1.InboundSpec{Authorization: policy()}
	must(t, k8s.Create(ctx, te))
	got := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	assert.Contains(t, got.Status.Message, `spec.inbound.authorization.rules[2].when`)
	assert.Contains(t, got.Status.Message, `rule "read-only" does not compile`)
	_, err := getCM(ctx, ns, "agent-token-exchange")
	assert.True(t, apierrors.IsNotFound(err), "nothing is written for an invalid spec")
}
