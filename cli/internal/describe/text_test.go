package describe

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/cli/internal/kube"
)

// TestConditionOrderIsStable: conditions written by two controllers (agentcard and netpol) appear in
// status in whichever order they were written; the text lists them by type.
func TestConditionOrderIsStable(t *testing.T) {
	render := func(conds ...kube.Condition) string {
		r := &Report{now: time.Now(), Workload: Workload{Kind: "Deployment", Namespace: "ns", Name: "w", Ready: "1/1 replicas ready"},
			Resources: []Resource{{Kind: "AgentCard", Name: "c", Conditions: conds}}}
		var b bytes.Buffer
		require.NoError(t, r.WriteText(&b))
		return b.String()
	}
	ready := kube.Condition{Type: "Ready", Status: "False", Reason: "NoReadyPods", Message: "no pod is ready"}
	synced := kube.Condition{Type: "Synced", Status: "False", Reason: "NoReadyPods"}
	policy := kube.Condition{Type: "NetworkPolicyReady", Status: "True", Reason: "RestrictivePolicyApplied"}
	a, b := render(ready, synced, policy), render(policy, ready, synced)
	require.Equal(t, a, b)
	require.Contains(t, a, "    Ready=False (NoReadyPods): no pod is ready\n    NetworkPolicyReady=True (RestrictivePolicyApplied), Synced=False (NoReadyPods)\n")
}

func TestExportedCardSaysWhetherTheHubGetsIt(t *testing.T) {
	render := func(c Card) string {
		r := &Report{now: time.Now(), Workload: Workload{Kind: "Deployment", Namespace: "ns", Name: "w", Ready: "1/1 replicas ready"}, AgentCards: []Card{c}}
		var b bytes.Buffer
		require.NoError(t, r.WriteText(&b))
		return b.String()
	}
	require.Contains(t, render(Card{Name: "c", Exported: true, Verified: true, Bound: true}), "exported to the federation hub (kagenti.io/export=true)")
	require.Contains(t, render(Card{Name: "c", Exported: true}), "but not verified and bound: the federation hub does not get it")
	require.NotContains(t, render(Card{Name: "c", Verified: true, Bound: true}), "federation")
}
