package resources

import (
	"fmt"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/duck"
)

// The meaning of the rendered policies, checked with an independent NetworkPolicy engine
// (cyclonus' matcher) over a small cluster: two verified agents in different namespaces, an
// unverified agent, the operator, cluster DNS, an unmanaged pod and the internet.

type peer struct {
	name      string
	namespace string
	labels    map[string]string
	ip        string // external peers only
}

func (p peer) traffic() *matcher.TrafficPeer {
	if p.ip != "" {
		return &matcher.TrafficPeer{IP: p.ip}
	}
	return &matcher.TrafficPeer{
		IP: "10.0.0.1",
		Internal: &matcher.InternalPeer{
			PodLabels: p.labels, Namespace: p.namespace,
			NamespaceLabels: map[string]string{NamespaceNameLabel: p.namespace},
		},
	}
}

var (
	// agentcard labels the pods of verified cards kagenti.io/signature-verified=true.
	verifiedA  = peer{name: "verifiedA", namespace: "agents", labels: map[string]string{"app": "weather", SignatureVerifiedLabel: "true"}}
	verifiedB  = peer{name: "verifiedB", namespace: "team-b", labels: map[string]string{"app": "search", SignatureVerifiedLabel: "true"}}
	unverified = peer{name: "unverified", namespace: "agents", labels: map[string]string{"app": "rogue", SignatureVerifiedLabel: "false"}}
	operatorP  = peer{name: "operator", namespace: "kagenti-system", labels: map[string]string{"app": "kagenti-agentcard"}}
	dnsP       = peer{name: "dns", namespace: "kube-system", labels: map[string]string{"k8s-app": "kube-dns"}}
	plainPod   = peer{name: "plainPod", namespace: "default", labels: map[string]string{"app": "web"}}
	internet   = peer{name: "internet", ip: "203.0.113.7"}
)

func cardFor(name, namespace string, verified bool) *view.AgentCard {
	c := &view.AgentCard{Name: name + "-card", Namespace: namespace, UID: types.UID("uid-" + name),
		TargetRef: &duck.TargetRef{Kind: "Deployment", Name: name}}
	status := metav1.ConditionFalse
	if verified {
		status = metav1.ConditionTrue
	}
	return withVerdict(c, status, "R", "")
}

func clusterPolicies(opts Options) []*networkingv1.NetworkPolicy {
	sel := func(app string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	return []*networkingv1.NetworkPolicy{
		MakeNetworkPolicy(cardFor("weather", "agents", true), sel("weather"), opts),
		MakeNetworkPolicy(cardFor("search", "team-b", true), sel("search"), opts),
		MakeNetworkPolicy(cardFor("rogue", "agents", false), sel("rogue"), opts),
	}
}

func allowed(policy *matcher.Policy, from, to peer, port int, proto corev1.Protocol) bool {
	return policy.IsTrafficAllowed(&matcher.Traffic{
		Source: from.traffic(), Destination: to.traffic(), ResolvedPort: port, Protocol: proto,
	}).IsAllowed()
}

func TestPolicySemantics(t *testing.T) {
	type row struct {
		from, to peer
		port     int
		proto    corev1.Protocol
		want     bool
	}
	common := []row{
		{verifiedA, verifiedB, 8080, corev1.ProtocolTCP, true},   // verified ↔ verified, across namespaces
		{verifiedB, verifiedA, 8080, corev1.ProtocolTCP, true},   //
		{unverified, verifiedA, 8080, corev1.ProtocolTCP, false}, // unverified → verified denied
		{verifiedA, unverified, 8080, corev1.ProtocolTCP, false}, // verified → unverified denied
		{operatorP, unverified, 8080, corev1.ProtocolTCP, true},  // operator → unverified allowed (re-verification)
		{operatorP, verifiedA, 8080, corev1.ProtocolTCP, true},   // operator → verified allowed
		{unverified, dnsP, 53, corev1.ProtocolUDP, true},         // DNS allowed
		{unverified, dnsP, 53, corev1.ProtocolTCP, true},         //
		{verifiedA, dnsP, 53, corev1.ProtocolUDP, true},          //
		{unverified, dnsP, 8080, corev1.ProtocolTCP, false},      // only port 53 on the DNS pods
		{unverified, internet, 443, corev1.ProtocolTCP, false},   // unverified → internet denied
		{unverified, operatorP, 8080, corev1.ProtocolTCP, true},  // to the platform namespace: the IdP its sidecars register with
		{plainPod, verifiedA, 8080, corev1.ProtocolTCP, false},   // unlabelled pods cannot reach agents
		{plainPod, unverified, 8080, corev1.ProtocolTCP, false},  //
		{internet, verifiedA, 8080, corev1.ProtocolTCP, false},   //
		{verifiedA, plainPod, 8080, corev1.ProtocolTCP, true},    // (depends on --egress below)
		{verifiedA, internet, 443, corev1.ProtocolTCP, true},     //
		{plainPod, internet, 443, corev1.ProtocolTCP, true},      // pods without a card are untouched
	}
	egressVerified := DefaultOptions()
	egressVerified.Egress, egressVerified.EgressCIDRs = EgressVerified, []string{"192.0.2.0/24"}
	for _, tc := range []struct {
		name     string
		opts     Options
		override []row
	}{
		{name: "egress=all", opts: DefaultOptions()},
		{name: "egress=verified", opts: egressVerified, override: []row{
			{verifiedA, plainPod, 8080, corev1.ProtocolTCP, false},
			{verifiedA, internet, 443, corev1.ProtocolTCP, false},
			{verifiedA, peer{name: "allowed-cidr", ip: "192.0.2.10"}, 443, corev1.ProtocolTCP, true},
			{verifiedA, verifiedB, 8080, corev1.ProtocolTCP, true},
			{verifiedA, dnsP, 53, corev1.ProtocolTCP, true},
			{verifiedA, operatorP, 8080, corev1.ProtocolTCP, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := matcher.BuildNetworkPolicies(false, clusterPolicies(tc.opts))
			rows := map[string]row{}
			key := func(r row) string { return fmt.Sprintf("%s→%s:%d/%s", r.from.name, r.to.name, r.port, r.proto) }
			for _, r := range append(append([]row{}, common...), tc.override...) {
				rows[key(r)] = r
			}
			for k, r := range rows {
				assert.Equal(t, r.want, allowed(policy, r.from, r.to, r.port, r.proto), k)
			}
		})
	}
}

// A verification flip changes the meaning: the same pods, re-rendered after the card is verified.
func TestPolicySemanticsFlip(t *testing.T) {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "rogue"}}
	card := cardFor("rogue", "agents", false)
	before := matcher.BuildNetworkPolicies(false, []*networkingv1.NetworkPolicy{MakeNetworkPolicy(card, sel, DefaultOptions())})
	withVerdict(card, metav1.ConditionTrue, "Verified", "")
	after := matcher.BuildNetworkPolicies(false, []*networkingv1.NetworkPolicy{MakeNetworkPolicy(card, sel, DefaultOptions())})
	nowVerified := unverified
	nowVerified.labels = map[string]string{"app": "rogue", SignatureVerifiedLabel: "true"}
	assert.False(t, allowed(before, verifiedA, unverified, 8080, corev1.ProtocolTCP))
	assert.True(t, allowed(after, verifiedA, nowVerified, 8080, corev1.ProtocolTCP))
	assert.False(t, allowed(before, unverified, internet, 443, corev1.ProtocolTCP))
	assert.True(t, allowed(after, nowVerified, internet, 443, corev1.ProtocolTCP))
}
