package check

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	agentTraceGVK    = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentTrace"}
	tokenExchangeGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "TokenExchange"}
	agentCardGVK     = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentCard"}
)

// A controller passes when its probe gets a status, with or without a Deployment in the install
// namespace, and fails when nothing reconciles the probe, with or without one.
func TestCheckControllersReconcileProbes(t *testing.T) {
	ns := installNamespace(t)
	deployment(t, ns, "kagenti-agenttrace", 0)
	deployment(t, ns, "kagenti-agentcard", 0)
	reconcileProbes(t, agentTraceGVK, false)
	reconcileProbes(t, tokenExchangeGVK, false)

	results := runCheck(t, clients(t), Options{Namespace: ns, Pillars: []string{"tokenexchange", "agenttrace", "agentcard", "netpol"}})
	requireLine(t, results, "✓ kagenti-agenttrace: Deployment "+ns+"/kagenti-agenttrace: 0/0 replicas ready; reconciled a probe AgentTrace")
	requireLine(t, results, "✓ kagenti-tokenexchange: reconciled a probe TokenExchange (no Deployment in "+ns+": it runs outside the cluster)")
	fix := requireLine(t, results, "✗ kagenti-agentcard: Deployment "+ns+"/kagenti-agentcard: 0/0 replicas ready, but nothing reconciled a probe AgentCard within 3s")
	require.Contains(t, fix, "    fix: kubectl -n "+ns+" describe deployment kagenti-agentcard; kubectl -n "+ns+" logs deployment/kagenti-agentcard")
	fix = requireLine(t, results, "✗ kagenti-netpol: not running: no Deployment "+ns+"/kagenti-netpol, and nothing reconciled a probe AgentCard within 3s")
	require.Contains(t, fix, "    fix: install it: kubectl apply -k deploy/kustomize/overlays/netpol-only (helm: --set netpol.enabled=true)")
	requireLine(t, results, "✓ CRD agenttraces.kagenti.io: established, serves v1alpha1 (storage v1alpha1)")
}

// netpol's probe is agentcard's AgentCard: only netpol's own condition on it counts for netpol. And
// a probe reconciled while an earlier pillar's wait used up the shared deadline (agentcard's, here:
// nothing reconciles it) still counts.
func TestCheckNetpolReconcilesTheAgentCardProbe(t *testing.T) {
	ns := installNamespace(t)
	reconcileProbes(t, agentCardGVK, true)
	results := runCheck(t, clients(t), Options{Namespace: ns, Pillars: []string{"agentcard", "netpol"}})
	requireLine(t, results, "✓ kagenti-netpol: reconciled a probe AgentCard (no Deployment in "+ns+": it runs outside the cluster)")
	requireLine(t, results, "✗ kagenti-agentcard: not running: no Deployment "+ns+"/kagenti-agentcard, and nothing reconciled a probe AgentCard within 3s")
}

// A Deployment that is not ready is the line, whatever the probe.
func TestCheckControllerDeploymentNotReady(t *testing.T) {
	ns := installNamespace(t)
	deployment(t, ns, "kagenti-agenttrace", 1)
	reconcileProbes(t, agentTraceGVK, false)
	requireLine(t, runCheck(t, clients(t), Options{Namespace: ns, Pillars: []string{"agenttrace"}}),
		"✗ kagenti-agenttrace: Deployment "+ns+"/kagenti-agenttrace: 0/1 replicas ready\n    fix: kubectl -n "+ns+" describe deployment kagenti-agenttrace")
}

// With --read-only there are no probes: a ready Deployment passes, no Deployment fails.
func TestCheckControllersReadOnly(t *testing.T) {
	ns := installNamespace(t)
	deployment(t, ns, "kagenti-agenttrace", 0)
	results := runCheck(t, clients(t), Options{Namespace: ns, Pillars: []string{"agenttrace", "tokenexchange"}, ReadOnly: true})
	requireLine(t, results, "✓ kagenti-agenttrace: Deployment "+ns+"/kagenti-agenttrace: 0/0 replicas ready (reconcile probe skipped: --read-only)")
	requireLine(t, results, "✗ kagenti-tokenexchange: no Deployment "+ns+"/kagenti-tokenexchange, and no reconcile probe (--read-only)")
}

// A pillar whose CRD is missing gets no probe: its Deployment's readiness is all that is said.
func TestCheckControllerWithoutItsCRD(t *testing.T) {
	ns := installNamespace(t)
	deleteCRD(t, "agentbuilds.kagenti.io")
	deployment(t, ns, "kagenti-agentbuild", 0)
	requireLine(t, runCheck(t, clients(t), Options{Namespace: ns, Pillars: []string{"agentbuild"}}),
		"✓ kagenti-agentbuild: Deployment "+ns+"/kagenti-agentbuild: 0/0 replicas ready (reconcile probe skipped: its CRD is missing)")
}

// What the user may not do is said: reading the Deployment, creating the scratch namespace,
// creating a probe.
func TestCheckControllersWithoutAccess(t *testing.T) {
	ns := installNamespace(t)
	base := readAll("apiextensions.k8s.io/customresourcedefinitions", "admissionregistration.k8s.io/mutatingwebhookconfigurations",
		"admissionregistration.k8s.io/validatingwebhookconfigurations")

	t.Run("no Deployment read", func(t *testing.T) {
		c := asUser(t, base...)
		requireLine(t, runCheck(t, c, Options{Namespace: ns, Pillars: []string{"agenttrace"}, ReadOnly: true}),
			"✗ kagenti-agenttrace: cannot read Deployment "+ns+"/kagenti-agenttrace: ")
	})
	t.Run("no scratch namespace", func(t *testing.T) {
		c := asUser(t, append(base, readAll("apps/deployments")...)...)
		requireLine(t, runCheck(t, c, Options{Namespace: ns, Pillars: []string{"agenttrace"}}),
			"✗ kagenti-agenttrace: no Deployment "+ns+"/kagenti-agenttrace, and no reconcile probe (cannot create a scratch namespace: ")
	})
	t.Run("no probe", func(t *testing.T) {
		c := asUser(t, append(base, append(readAll("apps/deployments", "kagenti.io/agenttraces"), allow("", "namespaces", "create", "delete"))...)...)
		fix := requireLine(t, runCheck(t, c, Options{Namespace: ns, Pillars: []string{"agenttrace"}}),
			"✗ kagenti-agenttrace: the probe AgentTrace could not be created: ")
		require.Contains(t, fix, "forbidden")
	})
}
