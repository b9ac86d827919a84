package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// TestKindAttestedCardFetchThroughAStrictSidecar: agentcard's attested card fetch against a real
// pod whose authbridge inbound runs mtls.mode strict, on kind. The agent serves its card on its own
// port; the pod's redirect sends agentcard's plain request to the strict inbound, which answers
// 426; agentcard, holding its own X.509 SVID from the SPIRE agent (helm agentcard.attestedFetch,
// hack/kind.sh registers its service account), asks again over mutual TLS with ALPN
// kagenti-mtls/1, requires the pod to present the SVID of the workload the card is bound to, and
// records fetchedOver mtls with the peer's SPIFFE ID.
func TestKindAttestedCardFetchThroughAStrictSidecar(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "tokenexchange")
	framework.RequirePillar(t, c, "agentcard")
	requireKindSPIRE(t, c)
	requireControllerFlag(t, c, "kagenti-agentcard", "--fetch-spiffe-socket", "agentcard.attestedFetch.enabled")
	ns := framework.Namespace(t, c, "kind-cardmtls", map[string]string{"kagenti.io/injection": "enabled"})
	agentID := "spiffe://cluster.local/ns/" + ns + "/sa/carded"

	// No IdP here: the card path is public anyway.
	carded := validatingOnly(deploymentRef("carded"), map[string]any{"validation": map[string]any{"enabled": false}})
	carded["mtls"] = map[string]any{"mode": "strict"}
	createKindTokenExchange(t, c, ns, "carded-auth", carded)
	createKindAgent(t, c, ns, "carded", map[string]string{"kagenti.io/spiffe": "enabled"}, transparentAgent,
		kindAgentCard("Carded Agent", "http://carded."+ns+".svc:8080"))
	registerKindWorkload(t, ns, "carded")
	pod := readyPodOf(t, c, ns, "carded")

	createKindAgentCard(t, c, ns, "carded")

	start := time.Now()
	framework.Eventually(t, 2*time.Minute, "AgentCard carded: the pod's card fetched over mutual TLS", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(agentcardE2EGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "carded"}, u); err != nil {
			return false, "", err
		}
		cards, _, _ := unstructured.NestedSlice(u.Object, "status", "cards")
		for _, e := range cards {
			m, _ := e.(map[string]any)
			if m["podName"] == pod.Name && m["fetchStatus"] == "Success" && m["fetchedOver"] == "mtls" && m["peerSpiffeID"] == agentID {
				return true, "", nil
			}
		}
		return false, fmt.Sprint(cards), nil
	})
	t.Logf("AgentCard created → card fetched over mutual TLS from the strict pod: %v", time.Since(start).Round(time.Second))
}
