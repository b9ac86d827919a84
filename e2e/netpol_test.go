package e2e

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

var agentCardGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentCard"}

// TestNetpolFollowsVerification: an AgentCard for a Deployment gets a restrictive NetworkPolicy
// "{workload}-agent-policy" owned by the card; when the card's signature is verified the policy
// turns permissive, when it fails again it turns restrictive, and it goes away with the card.
func TestNetpolFollowsVerification(t *testing.T) {
	c := framework.Client(t)
	framework.RequirePillar(t, c, "netpol")
	ns := framework.Namespace(t, c, "netpol", nil)

	labels := map[string]string{"app": "np-agent"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "np-agent", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: framework.PauseImage()}}},
			},
		},
	})
	card := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "np-agent"}},
	}}
	card.SetGroupVersionKind(agentCardGVK)
	card.SetNamespace(ns)
	card.SetName("np-agent-card")
	framework.Create(t, c, card)

	// Nothing verified the card's signature (no signed card is served here): restrictive.
	np := waitNetpol(t, c, ns, "np-agent-agent-policy", "restrictive")
	owner := metav1.GetControllerOf(np)
	if owner == nil || owner.Kind != "AgentCard" || owner.UID != card.GetUID() {
		t.Fatalf("policy is not controlled by the AgentCard: %+v", np.OwnerReferences)
	}
	if got := np.Spec.PodSelector.MatchLabels["app"]; got != "np-agent" {
		t.Fatalf("podSelector %v does not select the Deployment's pods", np.Spec.PodSelector)
	}
	waitNetpolCondition(t, c, card, "True", "RestrictivePolicyApplied")

	// Verification flips. agentcard would need a signed card and a SPIRE trust bundle to verify one;
	// where it runs, its own verdict stands and the flip is not played here.
	for _, p := range framework.RunningPillars(t) {
		if p.Name == "agentcard" {
			t.Log("kagenti-agentcard is running and owns the Verified condition; the verification flip is covered by netpol's envtest suite and TestAgentCard")
			deleteCardAndWait(t, c, card, np)
			return
		}
	}
	setVerdict(t, c, card, true)
	waitNetpol(t, c, ns, "np-agent-agent-policy", "permissive")
	waitNetpolCondition(t, c, card, "True", "PermissivePolicyApplied")
	setVerdict(t, c, card, false)
	waitNetpol(t, c, ns, "np-agent-agent-policy", "restrictive")
	deleteCardAndWait(t, c, card, np)
}

// setVerdict plays agentcard: its Verified condition for the card's generation, through
// server-side apply under its own manager.
func setVerdict(t *testing.T, c client.Client, card *unstructured.Unstructured, verified bool) {
	t.Helper()
	status := map[bool]string{true: "True", false: "False"}[verified]
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kagenti.io/v1alpha1", "kind": "AgentCard",
		"metadata": map[string]any{"name": card.GetName(), "namespace": card.GetNamespace()},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Verified", "status": status, "reason": "E2E", "message": "played by the e2e test",
			"observedGeneration": card.GetGeneration(), "lastTransitionTime": "2026-01-01T00:00:00Z",
		}}},
	}}
	if err := c.Status().Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner("e2e-agentcard"), client.ForceOwnership); err != nil {
		t.Fatalf("setting the Verified condition to %s: %v", status, err)
	}
}

func waitNetpol(t *testing.T, c client.Client, ns, name, kind string) *networkingv1.NetworkPolicy {
	t.Helper()
	np := &networkingv1.NetworkPolicy{}
	framework.Eventually(t, 60*time.Second, "NetworkPolicy "+name+" "+kind, func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, np); err != nil {
			if apierrors.IsNotFound(err) {
				return false, "not found", nil
			}
			return false, "", err
		}
		got := np.Annotations["kagenti.io/policy"]
		return got == kind, framework.Sprintf("%s (%s)", got, np.Annotations["kagenti.io/verification"]), nil
	})
	return np
}

func waitNetpolCondition(t *testing.T, c client.Client, card *unstructured.Unstructured, status, reason string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "NetworkPolicyReady="+status+" "+reason, func(ctx context.Context) (bool, string, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(agentCardGVK)
		if err := c.Get(ctx, client.ObjectKeyFromObject(card), got); err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, raw := range conds {
			cond, _ := raw.(map[string]any)
			if cond["type"] == "NetworkPolicyReady" {
				return cond["status"] == status && cond["reason"] == reason,
					framework.Sprintf("%v %v: %v", cond["status"], cond["reason"], cond["message"]), nil
			}
		}
		return false, "no NetworkPolicyReady condition", nil
	})
}

// deleteCardAndWait deletes the card; the policy goes with it (garbage collector or netpol itself).
func deleteCardAndWait(t *testing.T, c client.Client, card *unstructured.Unstructured, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if err := c.Delete(context.Background(), card); err != nil {
		t.Fatalf("deleting the AgentCard: %v", err)
	}
	framework.Eventually(t, 60*time.Second, "NetworkPolicy deleted with its AgentCard", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(np), &networkingv1.NetworkPolicy{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}
