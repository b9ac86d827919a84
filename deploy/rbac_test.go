package deploy_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// buildNS is a namespace where the platform engineer lets agentbuild build and deploy.
	buildNS = "team-a"
	// monitoringNS holds the scrapers: prometheus is bound to kagenti-metrics-reader, intruder is not.
	monitoringNS = "monitoring"
)

// TestShippedRBAC installs the kustomize overlay "all" and the helm chart (every pillar on, released
// into another namespace) on a real API server and asks its authorizer, as each binary's
// ServiceAccount, for the rights the binary needs and for the ones it must not have.
func TestShippedRBAC(t *testing.T) {
	t.Run("kustomize", func(t *testing.T) {
		_, _, c := startEnv(t)
		objs := render(t, tool(t, "kubectl"), "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "all"))
		install(t, c, objs)
		// What docs/security.md tells the platform engineer to do for a build namespace and for
		// Prometheus.
		namespaces(t, c, buildNS, monitoringNS)
		bind(t, c, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: buildNS, Name: "kagenti-agentbuild-builder"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kagenti-agentbuild-builder"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kagenti-system", Name: "kagenti-agentbuild"}},
		})
		bind(t, c, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-kagenti-metrics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kagenti-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: monitoringNS, Name: "prometheus"}},
		})
		check(t, c, "kagenti-system", expectedAccess("kagenti-system"))
	})
	t.Run("helm", func(t *testing.T) {
		_, _, c := startEnv(t)
		const releaseNS = "kagenti"
		namespaces(t, c, releaseNS, buildNS, monitoringNS)
		objs := render(t, tool(t, "helm"), "template", "kagenti", filepath.Join(repoRoot(), "deploy", "helm", "kagenti"),
			"--namespace", releaseNS, "--set", "netpol.enabled=true", "--set", "agentbuild.buildNamespaces={"+buildNS+"}",
			"--set", "metricsReader.subjects[0].kind=ServiceAccount", "--set", "metricsReader.subjects[0].name=prometheus",
			"--set", "metricsReader.subjects[0].namespace="+monitoringNS)
		install(t, c, objs)
		check(t, c, releaseNS, expectedAccess(releaseNS))
	})
	// "Which agents may I call" binds ClusterRole kagenti-agentcard-policyreader: agentcard lists
	// and watches the ConfigMaps (the token-exchange ones are all it keeps) and still writes none.
	policyReader := []access{
		{sa: "kagenti-agentcard", verb: "list", resource: "configmaps", allowed: true},
		{sa: "kagenti-agentcard", verb: "watch", resource: "configmaps", allowed: true},
		{sa: "kagenti-agentcard", verb: "get", resource: "secrets", namespace: "default", name: "anything"},
		{sa: "kagenti-agentcard", verb: "update", resource: "configmaps", namespace: "default", name: "callee-token-exchange"},
	}
	t.Run("helm with discovery.policies", func(t *testing.T) {
		_, _, c := startEnv(t)
		const releaseNS = "kagenti"
		namespaces(t, c, releaseNS)
		install(t, c, render(t, tool(t, "helm"), "template", "kagenti", filepath.Join(repoRoot(), "deploy", "helm", "kagenti"),
			"--namespace", releaseNS, "--set", "agentcard.discovery.policies=true"))
		check(t, c, releaseNS, policyReader)
	})
	t.Run("kustomize with the agentcard-discovery-policies component", func(t *testing.T) {
		_, _, c := startEnv(t)
		install(t, c, render(t, tool(t, "kubectl"), "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "agentcard-discovery-policies")))
		check(t, c, "kagenti-system", policyReader)
	})
}

// expectedAccess is what each binary may and may not do when installed into ns.
func expectedAccess(ns string) []access {
	var a []access
	for _, p := range pillars {
		sa := "kagenti-" + p
		a = append(a,
			// Authenticating and authorizing the scrapers of /metrics.
			access{sa: sa, verb: "create", group: "authentication.k8s.io", resource: "tokenreviews", allowed: true},
			access{sa: sa, verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews", allowed: true},
			// Leases only in the install namespace, never cluster-wide.
			access{sa: sa, verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "default"},
			access{sa: sa, verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: sa + ".kagenti.io"},
			// No binary reads Secrets outside its own namespace.
			access{sa: sa, verb: "list", resource: "secrets", namespace: "default"},
			access{sa: sa, verb: "get", resource: "secrets", namespace: "kube-system"},
		)
		if p != "injector" { // the webhook serves on every replica: no leader election
			for _, verb := range []string{"get", "create", "update"} {
				a = append(a, access{sa: sa, verb: verb, group: "coordination.k8s.io", resource: "leases", namespace: ns, name: sa + ".kagenti.io", allowed: true})
			}
		}
	}
	// The webhooks' certificate rotators: their own configuration and Secret, nothing else.
	a = append(a,
		access{sa: "kagenti-injector", verb: "list", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", allowed: true},
		access{sa: "kagenti-injector", verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "kagenti-injector", allowed: true},
		access{sa: "kagenti-injector", verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "another-webhook"},
		access{sa: "kagenti-injector", verb: "patch", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "another-webhook"},
		access{sa: "kagenti-injector", verb: "delete", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "kagenti-injector"},
		access{sa: "kagenti-injector", verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "kagenti-tokenexchange"},
		access{sa: "kagenti-injector", verb: "update", resource: "secrets", namespace: ns, name: "kagenti-injector-cert", allowed: true},
		access{sa: "kagenti-injector", verb: "update", resource: "secrets", namespace: ns, name: "kagenti-tokenexchange-cert"},
		// The injector watches Namespaces for their Pod Security labels (its admission warning); it
		// never writes them.
		access{sa: "kagenti-injector", verb: "list", resource: "namespaces", allowed: true},
		access{sa: "kagenti-injector", verb: "watch", resource: "namespaces", allowed: true},
		access{sa: "kagenti-injector", verb: "get", resource: "namespaces", name: "kube-system"},
		access{sa: "kagenti-injector", verb: "update", resource: "namespaces", name: "default"},
		access{sa: "kagenti-injector", verb: "patch", resource: "namespaces", name: "default"},
		access{sa: "kagenti-tokenexchange", verb: "list", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", allowed: true},
		access{sa: "kagenti-tokenexchange", verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "kagenti-tokenexchange", allowed: true},
		access{sa: "kagenti-tokenexchange", verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "another-webhook"},
		access{sa: "kagenti-tokenexchange", verb: "patch", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "another-webhook"},
		access{sa: "kagenti-tokenexchange", verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "kagenti-injector"},
		access{sa: "kagenti-tokenexchange", verb: "update", resource: "secrets", namespace: ns, name: "kagenti-tokenexchange-cert", allowed: true},
		access{sa: "kagenti-tokenexchange", verb: "update", resource: "secrets", namespace: ns, name: "kagenti-injector-cert"},
		// agentcard's discovery API rotator: its own Secret only, not the webhooks'.
		access{sa: "kagenti-agentcard", verb: "update", resource: "secrets", namespace: ns, name: "kagenti-agentcard-discovery-cert", allowed: true},
		access{sa: "kagenti-agentcard", verb: "update", resource: "secrets", namespace: ns, name: "kagenti-injector-cert"},
		access{sa: "kagenti-agentcard", verb: "patch", resource: "secrets", namespace: ns, name: "kagenti-tokenexchange-cert"},
		// agentcard reads no ConfigMap but the trust bundle unless "which agents may I call" is on
		// (TestShippedRBAC/helm_with_discovery.policies); it writes none outside its own namespace.
		access{sa: "kagenti-agentcard", verb: "list", resource: "configmaps"},
		access{sa: "kagenti-agentcard", verb: "watch", resource: "configmaps"},
		access{sa: "kagenti-agentcard", verb: "update", resource: "configmaps", namespace: "default", name: "callee-token-exchange"},
	)
	// agentbuild watches everywhere but builds and deploys only where it is bound.
	const ab = "kagenti-agentbuild"
	a = append(a,
		access{sa: ab, verb: "watch", group: "kagenti.io", resource: "agentbuilds", allowed: true},
		access{sa: ab, verb: "patch", group: "kagenti.io", resource: "agentbuilds", namespace: buildNS, name: "x"},
		access{sa: ab, verb: "watch", group: "apps", resource: "deployments", allowed: true},
		access{sa: ab, verb: "watch", group: "tekton.dev", resource: "pipelineruns", allowed: true},
		// Templates and steps come from its watch of ConfigMaps labelled kagenti.io/build-template
		// (RBAC cannot restrict a watch to a label): list and watch everywhere, nothing else.
		access{sa: ab, verb: "list", resource: "configmaps", allowed: true},
		access{sa: ab, verb: "watch", resource: "configmaps", allowed: true},
		access{sa: ab, verb: "get", resource: "configmaps", namespace: buildNS, name: "pipeline-template-dev"},
		access{sa: ab, verb: "update", resource: "configmaps", namespace: ns, name: "pipeline-template-dev"},
		access{sa: ab, verb: "patch", group: "apps", resource: "deployments", namespace: ns, name: "kagenti-injector"},
	)
	for _, r := range []struct{ group, resource, verb string }{
		{"apps", "deployments", "patch"}, {"apps", "statefulsets", "patch"}, {"apps", "daemonsets", "patch"},
		{"batch", "jobs", "patch"}, {"batch", "cronjobs", "patch"},
		{"", "persistentvolumeclaims", "delete"},
		{"tekton.dev", "pipelines", "create"}, {"tekton.dev", "pipelineruns", "create"}, {"tekton.dev", "pipelineruns", "delete"},
	} {
		a = append(a,
			access{sa: ab, verb: r.verb, group: r.group, resource: r.resource, namespace: buildNS, name: nameFor(r.verb), allowed: true},
			access{sa: ab, verb: r.verb, group: r.group, resource: r.resource, namespace: "kube-system", name: nameFor(r.verb)},
			access{sa: ab, verb: r.verb, group: r.group, resource: r.resource, name: nameFor(r.verb)}, // cluster-wide
		)
	}
	// Scraping /metrics: only with kagenti-metrics-reader.
	a = append(a,
		access{sa: "prometheus", saNS: monitoringNS, verb: "get", path: "/metrics", allowed: true},
		access{sa: "intruder", saNS: monitoringNS, verb: "get", path: "/metrics"},
	)
	for _, p := range pillars {
		a = append(a, access{sa: "kagenti-" + p, verb: "get", path: "/metrics"})
	}
	return a
}

// nameFor names the object of a request; creations carry none at authorization time.
func nameFor(verb string) string {
	if verb == "create" {
		return ""
	}
	return "agent"
}

func namespaces(t *testing.T, c client.Client, names ...string) {
	t.Helper()
	for _, n := range names {
		require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
}

func bind(t *testing.T, c client.Client, b client.Object) {
	t.Helper()
	require.NoError(t, c.Create(context.Background(), b))
}
