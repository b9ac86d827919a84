package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/duck"
)

// TestSharedStatus: agentcard and netpol both write an AgentCard's status through pkg/duck's
// StatusApplier, agentcard owning Ready, observedGeneration and Verified, netpol only
// NetworkPolicyReady; neither takes the other's fields. netpol's Events follow its condition: none
// for the first value when it is True, one when its reason changes.
func TestSharedStatus(t *testing.T) {
	startNetpol(t, ModeEnforce)
	ctx := context.Background()
	ns := namespace(t)
	deployment(t, k8s, ns, "shared-status")
	agentCard(t, k8s, ns, "shared-status-card", targetSpec("Deployment", "shared-status"))
	waitCondition(t, ns, "shared-status-card", metav1.ConditionTrue, api.ReasonRestrictive)

	// agentcard's own applier, as agentcard configures it: the summary conditions and its verdict.
	agentcard := &duck.StatusApplier{Client: k8s, FieldOwner: "kagenti-agentcard", Conditions: []string{view.ConditionVerified}}
	u := view.NewAgentCard()
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shared-status-card"}, u))
	current := view.StatusOf(u)
	desired := current.DeepCopyObject().(*view.CardStatus)
	desired.Status.Observe(u.GetGeneration())
	desired.Status.MarkReady("CardAvailable", "card available")
	desired.Status.Set(view.ConditionVerified, metav1.ConditionTrue, "Verified", "signed by the workload's identity")
	require.NoError(t, agentcard.Apply(ctx, current, desired))

	waitPolicy(t, ns, "shared-status-agent-policy", resources.Permissive)
	waitCondition(t, ns, "shared-status-card", metav1.ConditionTrue, api.ReasonPermissive)
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shared-status-card"}, u))
	got := view.StatusOf(u)
	assert.True(t, got.Status.IsReady(), "agentcard's Ready stands next to netpol's condition")
	assert.Equal(t, u.GetGeneration(), got.Status.ObservedGeneration)
	owned := map[string][]string{}
	for _, f := range u.GetManagedFields() {
		if f.Subresource != "status" {
			continue
		}
		var fields map[string]map[string]map[string]any
		require.NoError(t, json.Unmarshal(f.FieldsV1.Raw, &fields))
		conds := slices.Sorted(maps.Keys(fields["f:status"]["f:conditions"]))
		delete(fields["f:status"], "f:conditions")
		owned[f.Manager] = append(conds, slices.Sorted(maps.Keys(fields["f:status"]))...)
	}
	assert.Equal(t, []string{`k:{"type":"NetworkPolicyReady"}`}, owned[api.Name], "netpol owns its condition and nothing else")
	assert.Equal(t, []string{`k:{"type":"Ready"}`, `k:{"type":"Verified"}`, "f:observedGeneration"}, owned["kagenti-agentcard"])

	var reasons []string
	eventually(t, "an Event for the change to a permissive policy", func() (bool, string) {
		var list eventsv1.EventList
		require.NoError(t, k8s.List(ctx, &list, client.InNamespace(ns)))
		reasons = reasons[:0]
		for _, e := range list.Items {
			if e.Regarding.Name == "shared-status-card" {
				reasons = append(reasons, e.Type+" "+e.Reason)
			}
		}
		return slices.Contains(reasons, "Normal "+api.ReasonPermissive), fmt.Sprintf("events: %q", reasons)
	})
	assert.NotContains(t, reasons, "Normal "+api.ReasonRestrictive, "a first value that is True is no Event")
}
