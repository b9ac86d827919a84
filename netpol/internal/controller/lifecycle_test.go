package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// TestLifecycle: create → restrictive, verify → permissive, identity binding required → restrictive
// until bound, unverify → restrictive, tampering is undone, delete → policy gone.
func TestLifecycle(t *testing.T) {
	startNetpol(t, ModeEnforce)
	ctx := context.Background()
	ns := namespace(t)
	deployment(t, k8s, ns, "weather")
	card := agentCard(t, k8s, ns, "weather-card", targetSpec("Deployment", "weather"))

	// Not yet verified: restrictive, owned by the card, selecting the Deployment's pods.
	np := waitPolicy(t, ns, "weather-agent-policy", resources.Restrictive)
	assert.Equal(t, api.Name, np.Labels[contract.ManagedByLabel])
	owner := metav1.GetControllerOf(np)
	require.NotNil(t, owner, "the AgentCard controls the policy (garbage collection)")
	assert.Equal(t, card.GetUID(), owner.UID)
	assert.Equal(t, "AgentCard", owner.Kind)
	assert.Equal(t, map[string]string{"app": "weather"}, np.Spec.PodSelector.MatchLabels)
	assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
	restricted := waitCondition(t, ns, "weather-card", metav1.ConditionTrue, api.ReasonRestrictive)
	assert.Contains(t, restricted.Message, "agentcard has not reported a verdict yet")
	assert.Equal(t, card.GetGeneration(), restricted.ObservedGeneration)

	// agentcard verifies the signature: permissive within one reconcile.
	playAgentcard(t, k8s, ns, "weather-card", true)
	waitPolicy(t, ns, "weather-agent-policy", resources.Permissive)
	permissive := waitCondition(t, ns, "weather-card", metav1.ConditionTrue, api.ReasonPermissive)
	assert.Equal(t, restricted.LastTransitionTime, permissive.LastTransitionTime, "status stayed True: lastTransitionTime must not move")
	// netpol's condition lives next to agentcard's, neither wiped by the other.
	got := getCard(t, ns, "weather-card")
	require.NotNil(t, got.Condition("Ready"), "agentcard's condition survives netpol's apply")
	playAgentcard(t, k8s, ns, "weather-card", true)
	require.NotNil(t, getCard(t, ns, "weather-card").Condition(api.ConditionNetworkPolicyReady), "netpol's condition survives agentcard's apply")

	// The spec changes (a new identity binding): agentcard's verdict is about the old spec, so the
	// card is not verified until agentcard judges the new one.
	patch := []byte(`{"spec":{"identityBinding":{"trustDomain":"example.org"}}}`)
	require.NoError(t, k8s.Patch(ctx, card, client.RawPatch(types.MergePatchType, patch)))
	stale := waitPolicy(t, ns, "weather-agent-policy", resources.Restrictive)
	assert.Contains(t, stale.Annotations[resources.VerificationAnnotation], "generation 1")
	waitCondition(t, ns, "weather-card", metav1.ConditionTrue, api.ReasonRestrictive)
	playAgentcard(t, k8s, ns, "weather-card", true)
	waitPolicy(t, ns, "weather-agent-policy", resources.Permissive)
	playAgentcardReason(t, k8s, ns, "weather-card", false, "IdentityNotAllowed")
	np = waitPolicy(t, ns, "weather-agent-policy", resources.Restrictive)
	assert.Contains(t, np.Annotations[resources.VerificationAnnotation], "IdentityNotAllowed")

	// A hand edit of the policy is undone. The controller may still be writing its last change, so
	// the edit is retried on the latest version like any other writer's would be.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(np), np); err != nil {
			return err
		}
		np.Spec.Ingress = nil
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		return k8s.Update(ctx, np)
	}))
	eventually(t, "tampered policy restored", func() (bool, string) {
		cur := &networkingv1.NetworkPolicy{}
		_ = k8s.Get(ctx, client.ObjectKeyFromObject(np), cur)
		// Restrictive: ingress from the operator; egress to DNS and to the operator namespace.
		return len(cur.Spec.Ingress) == 1 && len(cur.Spec.Egress) == 2 && len(cur.Spec.Egress[0].To) == 1, "not restored"
	})
	// netpol's writes are recorded under its field manager, not the process name.
	restored := &networkingv1.NetworkPolicy{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(np), restored))
	managers := map[string]bool{}
	for _, f := range restored.ManagedFields {
		managers[f.Manager] = true
	}
	assert.True(t, managers[api.Name], "field managers: %v", managers)

	// Events on the card.
	eventually(t, "events on the AgentCard", func() (bool, string) {
		var list eventsv1.EventList
		_ = k8s.List(ctx, &list, client.InNamespace(ns))
		reasons := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Name == "weather-card" {
				reasons[e.Reason] = true
			}
		}
		return reasons["PolicyUpdated"], "reasons seen: " + keys(reasons)
	})

	// Deleting the card deletes the policy (envtest has no garbage collector: netpol does it).
	require.NoError(t, k8s.Delete(ctx, card))
	waitNoPolicy(t, ns, "weather-agent-policy")
}

// TestPolicyEventsRecordChanges: a card's first policy is reported by its NetworkPolicyReady
// condition, not by an Event (a thousand cards at start-up would be a thousand Events); a policy
// created again for a card already reported on (deleted by hand here; a new target, a workload
// that appeared) is an Event, and so is a change of kind.
func TestPolicyEventsRecordChanges(t *testing.T) {
	startNetpol(t, ModeEnforce)
	ctx := context.Background()
	ns := namespace(t)
	deployment(t, k8s, ns, "evented")
	agentCard(t, k8s, ns, "evented-card", targetSpec("Deployment", "evented"))
	waitPolicy(t, ns, "evented-agent-policy", resources.Restrictive)
	waitCondition(t, ns, "evented-card", metav1.ConditionTrue, api.ReasonRestrictive)

	playAgentcard(t, k8s, ns, "evented-card", true)
	np := waitPolicy(t, ns, "evented-agent-policy", resources.Permissive)
	waitCondition(t, ns, "evented-card", metav1.ConditionTrue, api.ReasonPermissive)
	require.NoError(t, k8s.Delete(ctx, np))
	eventually(t, "the deleted policy created again", func() (bool, string) {
		cur := &networkingv1.NetworkPolicy{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(np), cur)
		return err == nil && cur.UID != np.UID, "not yet"
	})

	notes := func() map[string]bool {
		var list eventsv1.EventList
		require.NoError(t, k8s.List(ctx, &list, client.InNamespace(ns)))
		out := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Name == "evented-card" {
				out[e.Reason+": "+e.Note] = true
			}
		}
		return out
	}
	recreated := "PolicyCreated: created permissive NetworkPolicy evented-agent-policy"
	eventually(t, "an Event for the policy created again", func() (bool, string) {
		seen := notes()
		return seen[recreated], "events: " + keys(seen)
	})
	// The Events of one card are recorded in the order they happened; the first policy's would be
	// there by now.
	seen := notes()
	assert.True(t, seen["PolicyUpdated: updated NetworkPolicy evented-agent-policy to permissive"], "events: %s", keys(seen))
	assert.False(t, seen["PolicyCreated: created restrictive NetworkPolicy evented-agent-policy"],
		"the card's first policy is no Event (its condition reports it); events: %s", keys(seen))
}

func keys(m map[string]bool) string {
	s := ""
	for k := range m {
		s += k + " "
	}
	return s
}

// TestTargetResolution: a missing workload is reported and recovers when it appears; a card that
// changes target moves its policy; selector mode; other workload kinds.
func TestTargetResolution(t *testing.T) {
	startNetpol(t, ModeEnforce)
	ctx := context.Background()
	ns := namespace(t)

	card := agentCard(t, k8s, ns, "late-card", targetSpec("Deployment", "late"))
	c := waitCondition(t, ns, "late-card", metav1.ConditionFalse, "TargetNotFound")
	assert.Contains(t, c.Message, `Deployment "late" not found`)
	deployment(t, k8s, ns, "late")
	waitPolicy(t, ns, "late-agent-policy", resources.Restrictive)
	waitCondition(t, ns, "late-card", metav1.ConditionTrue, api.ReasonRestrictive)

	// Retarget: the old policy goes, the new one comes.
	deployment(t, k8s, ns, "other")
	require.NoError(t, k8s.Patch(ctx, card, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"targetRef":{"name":"other"}}}`))))
	np := waitPolicy(t, ns, "other-agent-policy", resources.Restrictive)
	assert.Equal(t, map[string]string{"app": "other"}, np.Spec.PodSelector.MatchLabels)
	waitNoPolicy(t, ns, "late-agent-policy")

	// The workload's selector changes (template labels change with it): the policy follows.
	d := &appsv1.Deployment{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "other"}, d))
	require.NoError(t, k8s.Delete(ctx, d))
	d2 := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Spec: *d.Spec.DeepCopy()}
	d2.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other", "track": "stable"}}
	d2.Spec.Template.Labels = map[string]string{"app": "other", "track": "stable"}
	require.NoError(t, k8s.Create(ctx, d2))
	eventually(t, "policy follows the new selector", func() (bool, string) {
		cur := &networkingv1.NetworkPolicy{}
		_ = k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "other-agent-policy"}, cur)
		return cur.Spec.PodSelector.MatchLabels["track"] == "stable", "selector " + cur.Spec.PodSelector.String()
	})

	// Selector mode: named after the card, selecting what the card selects.
	agentCard(t, k8s, ns, "search", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "search"}}})
	np = waitPolicy(t, ns, "search-agent-policy", resources.Restrictive)
	assert.Equal(t, map[string]string{"app": "search"}, np.Spec.PodSelector.MatchLabels)

	// StatefulSet and CronJob targets.
	labels := map[string]string{"app": "db"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "x"}}}}
	require.NoError(t, k8s.Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}))
	agentCard(t, k8s, ns, "db-card", targetSpec("StatefulSet", "db"))
	np = waitPolicy(t, ns, "db-agent-policy", resources.Restrictive)
	assert.Equal(t, labels, np.Spec.PodSelector.MatchLabels)
}

// TestConflict: a policy of the same name that netpol does not manage is never overwritten.
func TestConflict(t *testing.T) {
	startNetpol(t, ModeEnforce)
	ctx := context.Background()
	ns := namespace(t)
	theirs := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-agent-policy", Namespace: ns},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}},
	}
	require.NoError(t, k8s.Create(ctx, theirs))
	deployment(t, k8s, ns, "taken")
	agentCard(t, k8s, ns, "taken-card", targetSpec("Deployment", "taken"))
	c := waitCondition(t, ns, "taken-card", metav1.ConditionFalse, api.ReasonPolicyConflict)
	assert.Contains(t, c.Message, `NetworkPolicy "taken-agent-policy" exists and is not managed by this controller`)
	assert.Contains(t, c.Message, "no owner reference and no app.kubernetes.io/managed-by=kagenti-netpol label")
	cur := &networkingv1.NetworkPolicy{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(theirs), cur))
	assert.Equal(t, theirs.Spec, cur.Spec, "the user's policy is untouched")
	assert.Empty(t, cur.OwnerReferences, "the user's policy is not adopted")
	assert.Equal(t, theirs.ResourceVersion, cur.ResourceVersion, "the user's policy was never written")

	// A policy labelled as netpol's with no owner (its card was deleted with --cascade=orphan and
	// created again) is netpol's: adopted by the new card and brought up to date.
	orphan := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan-agent-policy", Namespace: ns,
			Labels: map[string]string{contract.ManagedByLabel: api.Name}},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}},
	}
	require.NoError(t, k8s.Create(ctx, orphan))
	deployment(t, k8s, ns, "orphan")
	card := agentCard(t, k8s, ns, "orphan-card", targetSpec("Deployment", "orphan"))
	waitCondition(t, ns, "orphan-card", metav1.ConditionTrue, api.ReasonRestrictive)
	adopted := waitPolicy(t, ns, "orphan-agent-policy", resources.Restrictive)
	require.NotNil(t, metav1.GetControllerOf(adopted))
	assert.Equal(t, card.GetUID(), metav1.GetControllerOf(adopted).UID)
	assert.Equal(t, map[string]string{"app": "orphan"}, adopted.Spec.PodSelector.MatchLabels)

	// Two cards for one workload: the second one reports the conflict.
	deployment(t, k8s, ns, "shared")
	agentCard(t, k8s, ns, "first", targetSpec("Deployment", "shared"))
	waitCondition(t, ns, "first", metav1.ConditionTrue, api.ReasonRestrictive)
	agentCard(t, k8s, ns, "second", targetSpec("Deployment", "shared"))
	c = waitCondition(t, ns, "second", metav1.ConditionFalse, api.ReasonPolicyConflict)
	assert.Contains(t, c.Message, `NetworkPolicy "shared-agent-policy" exists and is not managed by this controller (controlled by AgentCard first)`)
}

// TestModes: enforce writes, audit reports without writing, off removes what netpol wrote.
func TestModes(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	deployment(t, k8s, ns, "modal")

	stop := startNetpol(t, ModeEnforce)
	agentCard(t, k8s, ns, "modal-card", targetSpec("Deployment", "modal"))
	waitPolicy(t, ns, "modal-agent-policy", resources.Restrictive)
	stop()

	stop = startNetpol(t, ModeAudit)
	playAgentcard(t, k8s, ns, "modal-card", true)
	c := waitCondition(t, ns, "modal-card", metav1.ConditionFalse, api.ReasonAuditMode)
	assert.Contains(t, c.Message, "would apply permissive NetworkPolicy modal-agent-policy")
	assert.Contains(t, c.Message, "the existing policy differs and was left unchanged")
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "modal-agent-policy"}, np))
	assert.Equal(t, resources.Restrictive, np.Annotations[resources.PolicyKindAnnotation], "audit never writes")
	// A new card in audit mode gets no policy at all.
	deployment(t, k8s, ns, "fresh")
	agentCard(t, k8s, ns, "fresh-card", targetSpec("Deployment", "fresh"))
	c = waitCondition(t, ns, "fresh-card", metav1.ConditionFalse, api.ReasonAuditMode)
	assert.Contains(t, c.Message, "no such policy exists, nothing was written")
	stop()

	startNetpol(t, ModeOff)
	waitNoPolicy(t, ns, "modal-agent-policy")
	eventually(t, "NetworkPolicyReady removed in mode off", func() (bool, string) {
		card := getCard(t, ns, "modal-card")
		return card.Condition(api.ConditionNetworkPolicyReady) == nil && card.Condition("Ready") != nil, "condition still there"
	})
}

// TestInvalidSelector: an empty selector would select the whole namespace and is refused.
func TestInvalidSelector(t *testing.T) {
	startNetpol(t, ModeEnforce)
	ns := namespace(t)
	agentCard(t, k8s, ns, "everything", map[string]any{"selector": map[string]any{}})
	c := waitCondition(t, ns, "everything", metav1.ConditionFalse, api.ReasonInvalidSelector)
	assert.Contains(t, c.Message, "spec.selector is empty and would select every pod")
	var list networkingv1.NetworkPolicyList
	require.NoError(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))
	assert.Empty(t, list.Items)
}
