package check

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/cli/internal/kube"
)

var federatedClusterGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "FederatedCluster"}

// federation reports each member registered on this cluster when it is a federation hub; a
// cluster without FederatedClusters gets no line.
func (r *runner) federation(ctx context.Context) {
	if !r.c.Served(federatedClusterGVK) {
		return
	}
	items, err := r.c.List(ctx, federatedClusterGVK, "", metav1.ListOptions{})
	if err != nil {
		r.fail("federation", "check your access to federatedclusters.kagenti.io (kubectl auth can-i list federatedclusters.kagenti.io)", "cannot list FederatedClusters: %v", err)
		return
	}
	for i := range items {
		r.results = append(r.results, federatedClusterResult(&items[i]))
	}
}

// federatedClusterResult is one member's line: Ready, or why not and what to do.
func federatedClusterResult(u *unstructured.Unstructured) Result {
	subject := "federated cluster " + u.GetName()
	cards, _, _ := unstructured.NestedInt64(u.Object, "status", "cards")
	stale, _, _ := unstructured.NestedInt64(u.Object, "status", "staleCards")
	refused, _, _ := unstructured.NestedInt64(u.Object, "status", "refusedCards")
	counts := fmt.Sprintf("%d cards served, %d stale, %d refused", cards, stale, refused)
	ready := kube.FindCondition(kube.Conditions(u), "Ready")
	if ready == nil {
		return Result{Status: Fail, Subject: subject, Detail: "no status yet: no federation hub leader reports on it",
			Fix: "run kagenti-agentcard with --federation=hub on this cluster (docs/federation.md)"}
	}
	if ready.Status == "True" {
		if refused > 0 {
			accepted := kube.FindCondition(kube.Conditions(u), "CardsAccepted")
			msg := ""
			if accepted != nil {
				msg = ": " + accepted.Message
			}
			return Result{Status: Fail, Subject: subject, Detail: "connected; " + counts + msg,
				Fix: "kubectl get federatedcluster " + u.GetName() + " -o yaml (status.refusals names each refused card and why)"}
		}
		// The member is served on the bundle in effect, but its CA's next rotation will not reach
		// the hub while its bundle endpoint fails.
		if tb := kube.FindCondition(kube.Conditions(u), "TrustBundleCurrent"); tb != nil && tb.Status == "False" && tb.Reason != "Pending" {
			return Result{Status: Fail, Subject: subject, Detail: fmt.Sprintf("connected; %s; trust bundle not refreshed (%s: %s)", counts, tb.Reason, tb.Message),
				Fix: map[string]string{
					"EndpointUnreachable":      "check spec.bundleEndpoint.url and the hub's network path to it (the hub dials it; a member's SPIRE serves it with federation.bundle_endpoint)",
					"EndpointNotAuthenticated": "set spec.bundleEndpoint.spiffeID to the identity the endpoint presents (SPIRE: spiffe://<trust domain>/spire/server), or fix spec.trustBundle if the member's CA rotated past it",
					"BundleRejected":           "point spec.bundleEndpoint.url at the member trust domain's own bundle endpoint",
				}[tb.Reason]}
		}
		return Result{Status: Pass, Subject: subject, Detail: "connected; " + counts}
	}
	fix := map[string]string{
		"CertificateExpired":   "rotate the member agent's X.509-SVID (SPIRE does it by itself; with certificate files, reissue them)",
		"UntrustedCertificate": "update spec.trustBundle with the member trust domain's current bundle",
		"InvalidTrustBundle":   "set spec.trustBundle to PEM certificates or a SPIFFE JSON bundle of the member's trust domain",
		"UnknownCluster":       "run the member agent as spec.agentSpiffeID with --cluster-name=" + u.GetName(),
		"ClusterIDMismatch":    "register the member under its About API cluster ID (cluster.clusterset.k8s.io)",
		"DuplicateTrustDomain": "give each member its own trust domain; delete the duplicate registration",
		"NeverConnected":       "start the member with --federation=member --federation-hub-address=<this hub>:9443 (docs/federation.md)",
		"Stale":                "check the member agent and its network path to the hub",
		"Withdrawn":            "check the member agent and its network path to the hub",
	}[ready.Reason]
	if fix == "" {
		fix = "kubectl describe federatedcluster " + u.GetName()
	}
	return Result{Status: Fail, Subject: subject, Detail: fmt.Sprintf("not ready (%s: %s); %s", ready.Reason, ready.Message, counts), Fix: fix}
}
