package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kagenti/platform/e2e/framework"
)

// TestKindMTLSBetweenSidecars: mutual TLS between the sidecars of two real pods on kind, both
// presenting X.509 SVIDs that the real SPIRE agent issued through the Workload API. The caller's
// agent still speaks plain HTTP to callee:8080; its outbound proxy (permissive) exchanges the
// user's token and originates mTLS to the callee's pod, whose inbound proxy (strict) terminates
// it. The callee's policy allows only the peer whose SVID is the caller's (`peer`, a CEL fact
// only an mTLS handshake sets) and denies by default, so an answer proves the handshake and the
// identity it carried. A plain-HTTP request to the strict callee is refused with mtls_required.
func TestKindMTLSBetweenSidecars(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "tokenexchange")
	requireKindSPIRE(t, c)
	ns := framework.Namespace(t, c, "kind-mtls", map[string]string{"kagenti.io/injection": "enabled"})
	callerID := "spiffe://cluster.local/ns/" + ns + "/sa/caller"
	calleeID := "spiffe://cluster.local/ns/" + ns + "/sa/callee"
	issuer := "http://idp." + ns + ".svc:9080"

	copySPIREBundle(t, c, ns)
	createKindIdP(t, c, ns, kindIdP{issuer: issuer, clients: []string{"user:user-secret:" + callerID}, spiffeBundle: true})
	calleeHost := "callee." + ns + ".svc"
	validation := kindValidation(issuer)
	// The caller is permissive (the test reaches its agent over plain HTTP through a port-forward;
	// its outbound still originates mTLS to any sidecar that accepts it), the callee strict: the
	// migration the modes are for, and the strict side proves the handshake.
	createKindTokenExchange(t, c, ns, "caller-auth", map[string]any{
		"targetRef":          map[string]any{"kind": "Deployment", "name": "caller"},
		"spiffe":             map[string]any{"audience": issuer},
		"clientRegistration": map[string]any{"enabled": false},
		"inbound":            map[string]any{"validation": validation},
		"outbound": map[string]any{"tokenExchange": map[string]any{
			"tokenUrl": issuer + "/oauth/token", "destinationRules": exchangeRoute(calleeHost, calleeID)}},
		"mtls": map[string]any{"mode": "permissive"},
	})
	calleeSpec := validatingOnly(deploymentRef("callee"), map[string]any{"validation": validation, "authorization": map[string]any{
		"default": "Deny",
		"rules":   []any{map[string]any{"name": "caller-over-mtls", "effect": "Allow", "when": `peer == "` + callerID + `"`}},
	}})
	calleeSpec["mtls"] = map[string]any{"mode": "strict"}
	createKindTokenExchange(t, c, ns, "callee-auth", calleeSpec)
	spiffe := map[string]string{"kagenti.io/spiffe": "enabled"}
	createKindAgent(t, c, ns, "caller", spiffe, transparentAgent)
	createKindAgent(t, c, ns, "callee", spiffe, transparentAgent)
	for _, sa := range []string{"caller", "callee"} {
		registerKindWorkload(t, ns, sa)
	}
	caller := readyPodOf(t, c, ns, "caller")
	callee := readyPodOf(t, c, ns, "callee")

	user := clientCredentialsToken(t, "http://"+framework.PortForward(t, ns, podOf(t, c, ns, "idp"), 9080), "user", "user-secret")
	t.Run("caller → callee over mTLS: the callee's policy saw the caller's SVID as the peer", func(t *testing.T) {
		res := kindCall(t, "http://"+framework.PortForward(t, ns, caller.Name, inboundPort), calleeHost, user)
		got := decodeReport(t, res)
		if got.Pod != callee.Name {
			t.Fatalf("answered by %q (status %d), want the callee's agent %s: the callee's inbound refused the call (no mTLS peer, or another one)", got.Pod, res.Status, callee.Name)
		}
		if claims := jwtClaims(t, bearer(got.Headers)); fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{calleeID}) {
			t.Errorf("exchanged token audience %v, want [%s]", claims["aud"], calleeID)
		}
	})

	t.Run("plain HTTP to the strict callee is refused: mtls_required", func(t *testing.T) {
		status, body := httpGet(t, "http://"+framework.PortForward(t, ns, callee.Name, inboundPort)+"/tasks", "", user)
		if status != http.StatusUpgradeRequired || !strings.Contains(body, "mtls_required") {
			t.Fatalf("plain HTTP to a strict callee: %d %s; want 426 mtls_required", status, body)
		}
	})
}
