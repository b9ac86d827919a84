package check

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestWriteMarksAndFixes(t *testing.T) {
	var b bytes.Buffer
	results := []Result{
		{Status: Pass, Subject: "CRD a", Detail: "established"},
		{Status: Fail, Subject: "webhook w", Detail: "refused", Fix: "start it\nthen retry"},
		{Status: Skip, Subject: "identity", Detail: "not used"},
	}
	require.NoError(t, Write(&b, results))
	require.Equal(t, "✓ CRD a: established\n✗ webhook w: refused\n    fix: start it\n    fix: then retry\n– identity: not used\n\n1 of 3 checks failed.\n", b.String())
	require.Equal(t, 1, Failed(results))

	b.Reset()
	require.NoError(t, Write(&b, results[:1]))
	require.Equal(t, "✓ CRD a: established\n\nAll checks passed.\n", b.String())
}

// TestProbeObserved: a probe counts as reconciled by its own pillar only: the status netpol writes
// on an AgentCard (NetworkPolicyReady) says nothing about agentcard, and the other way round.
func TestProbeObserved(t *testing.T) {
	card := func(conds ...map[string]any) *unstructured.Unstructured {
		var list []any
		for _, c := range conds {
			list = append(list, c)
		}
		u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": list}}}
		u.SetGeneration(1)
		return u
	}
	netpol := map[string]any{"type": "NetworkPolicyReady", "status": "False", "reason": "TargetNotFound", "observedGeneration": int64(1)}
	agentcard := map[string]any{"type": "Ready", "status": "False", "reason": "TargetNotFound", "observedGeneration": int64(1)}
	require.False(t, observed("agentcard", card(netpol)))
	require.True(t, observed("netpol", card(netpol)))
	require.True(t, observed("agentcard", card(agentcard)))
	require.False(t, observed("netpol", card(agentcard)))
	stale := card(map[string]any{"type": "Ready", "status": "True", "observedGeneration": int64(1)})
	stale.SetGeneration(2)
	require.False(t, observed("agentcard", stale), "a status of an older generation is not this probe's")
}

func TestValidate(t *testing.T) {
	require.NoError(t, Options{Pillars: AllPillars, Identity: "auto"}.Validate())
	require.ErrorContains(t, Options{Pillars: []string{"injektor"}, Identity: "auto"}.Validate(), `unknown pillar "injektor"`)
	require.ErrorContains(t, Options{Pillars: AllPillars, Identity: "maybe"}.Validate(), "--identity=maybe: auto, true or false")
}

func TestFederatedClusterLines(t *testing.T) {
	fc := func(status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
		u.SetName("a")
		return u
	}
	cond := func(typ, status, reason, msg string) any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg}
	}
	r := federatedClusterResult(fc(map[string]any{"cards": int64(3), "conditions": []any{cond("Ready", "True", "CardsServed", "")}}))
	require.Equal(t, Pass, r.Status)
	require.Equal(t, "connected; 3 cards served, 0 stale, 0 refused", r.Detail)

	r = federatedClusterResult(fc(map[string]any{"cards": int64(3), "refusedCards": int64(1), "conditions": []any{
		cond("Ready", "True", "CardsServed", ""), cond("CardsAccepted", "False", "CardRefused", "1 of the member's cards refused; agents/x: SignerOutsideTrustDomain: m")}}))
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Detail, "SignerOutsideTrustDomain")
	require.Contains(t, r.Fix, "status.refusals")

	r = federatedClusterResult(fc(map[string]any{"conditions": []any{cond("Ready", "False", "CertificateExpired", "the certificate of spiffe://a/x expired")}}))
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Detail, "CertificateExpired")
	require.Contains(t, r.Fix, "rotate")

	r = federatedClusterResult(fc(map[string]any{}))
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Fix, "--federation=hub")

	// Served, but the member's bundle endpoint fails: its next CA rotation would not reach the hub.
	r = federatedClusterResult(fc(map[string]any{"cards": int64(3), "conditions": []any{cond("Ready", "True", "CardsServed", ""),
		cond("TrustBundleCurrent", "False", "EndpointNotAuthenticated", "endpoint https://spire.a:8443: unexpected ID")}}))
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Detail, "trust bundle not refreshed (EndpointNotAuthenticated: endpoint https://spire.a:8443: unexpected ID)")
	require.Contains(t, r.Fix, "spec.bundleEndpoint.spiffeID")
	r = federatedClusterResult(fc(map[string]any{"cards": int64(3), "conditions": []any{cond("Ready", "True", "CardsServed", ""),
		cond("TrustBundleCurrent", "True", "Refreshed", "fetched")}}))
	require.Equal(t, Pass, r.Status)
}
