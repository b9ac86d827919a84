// Package resources turns an AgentCard's verification verdict into the NetworkPolicy that enforces
// it. Everything here is pure: no client, no clock.
package resources

import (
	"fmt"
	"net"
	"sort"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

const (
	// SignatureVerifiedLabel is the Pod label agentcard writes after verifying a card.
	SignatureVerifiedLabel = "kagenti.io/signature-verified"
	// NamespaceNameLabel is set by the API server on every namespace.
	NamespaceNameLabel = "kubernetes.io/metadata.name"
	// PolicyKindAnnotation records which policy was rendered ("permissive" or "restrictive").
	PolicyKindAnnotation = "kagenti.io/policy"
	// VerificationAnnotation records why, in words.
	VerificationAnnotation = "kagenti.io/verification"
)

// Egress modes for verified agents.
const (
	// EgressAll lets verified agents reach anything.
	EgressAll = "all"
	// EgressVerified restricts verified agents to other verified agents, the operator namespace,
	// DNS and EgressCIDRs.
	EgressVerified = "verified"
)

// Kind of policy.
const (
	Permissive  = "permissive"
	Restrictive = "restrictive"
)

// Options are the cluster-wide settings from the command line.
type Options struct {
	// OperatorNamespace may always reach agents (agentcard fetches and re-verifies cards from there),
	// and agents may always reach it (the IdP their identity sidecars register with).
	OperatorNamespace string
	// DNSNamespace and DNSPodLabels select the cluster DNS pods (kube-dns: kube-system, k8s-app=kube-dns).
	DNSNamespace string
	DNSPodLabels map[string]string
	// Egress is EgressAll or EgressVerified.
	Egress string
	// EgressCIDRs are extra destinations for verified agents when Egress is EgressVerified.
	EgressCIDRs []string
}

// DefaultOptions are the defaults of the command line flags.
func DefaultOptions() Options {
	return Options{
		OperatorNamespace: "kagenti-system",
		DNSNamespace:      "kube-system",
		DNSPodLabels:      map[string]string{"k8s-app": "kube-dns"},
		Egress:            EgressAll,
	}
}

// Validate reports bad flag values with the flag's name.
func (o Options) Validate() error {
	if o.OperatorNamespace == "" {
		return fmt.Errorf("--operator-namespace must not be empty")
	}
	if o.DNSNamespace == "" || len(o.DNSPodLabels) == 0 {
		return fmt.Errorf("--dns-namespace and --dns-labels must not be empty")
	}
	switch o.Egress {
	case EgressAll, EgressVerified:
	default:
		return fmt.Errorf("--egress: %q is not one of all, verified", o.Egress)
	}
	for _, c := range o.EgressCIDRs {
		if _, _, err := net.ParseCIDR(c); err != nil {
			return fmt.Errorf("--egress-cidrs: %q is not a CIDR: %v", c, err)
		}
	}
	return nil
}

// PolicyName is the NetworkPolicy's name: "{workload}-agent-policy" in targetRef mode and
// "{card}-agent-policy" in selector mode, shortened with a hash when too long.
func PolicyName(card *view.AgentCard) string {
	if card.TargetRef != nil {
		return configmap.AgentPolicyName(card.TargetRef.Name)
	}
	return configmap.AgentPolicyName(card.Name)
}

// KindFor names the policy a verdict calls for.
func KindFor(v view.Verification) string {
	if v.Verified {
		return Permissive
	}
	return Restrictive
}

// MakeNetworkPolicy renders the policy for card's pods (selected by podSelector): permissive when
// the card is verified, restrictive otherwise. The AgentCard is its controlling owner.
func MakeNetworkPolicy(card *view.AgentCard, podSelector metav1.LabelSelector, opts Options) *networkingv1.NetworkPolicy {
	v := card.Verify()
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      PolicyName(card),
			Namespace: card.Namespace,
			Labels:    map[string]string{contract.ManagedByLabel: api.Name},
			Annotations: map[string]string{
				PolicyKindAnnotation:   KindFor(v),
				VerificationAnnotation: v.Reason,
			},
			OwnerReferences: []metav1.OwnerReference{OwnerRef(card)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *podSelector.DeepCopy(),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if v.Verified {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{verifiedAgents(), operator(opts)}}}
		np.Spec.Egress = verifiedEgress(opts)
	} else {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{operator(opts)}}}
		// DNS, and the operator namespace: the agent's identity sidecars register with the IdP and
		// exchange tokens there (the shipped IdP URL is keycloak.kagenti-system.svc). Without it an
		// unverified agent's sidecars never become ready, so the agent never serves the card that
		// would verify it (seen on kind, issue 27).
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{dns(opts), {To: []networkingv1.NetworkPolicyPeer{operator(opts)}}}
	}
	return np
}

// OwnerRef makes the AgentCard the policy's controller, so the garbage collector deletes it with the card.
func OwnerRef(card *view.AgentCard) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         view.GroupVersion.String(),
		Kind:               view.AgentCardGVK.Kind,
		Name:               card.Name,
		UID:                card.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// verifiedAgents: pods labelled kagenti.io/signature-verified=true in any namespace.
func verifiedAgents() networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{SignatureVerifiedLabel: "true"}},
	}
}

// operator: every pod of the operator namespace.
func operator(opts Options) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: opts.OperatorNamespace}},
	}
}

// dns: the cluster DNS pods on port 53, UDP and TCP.
func dns(opts Options) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: opts.DNSNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: copyMap(opts.DNSPodLabels)},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))},
			{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(53))},
		},
	}
}

func verifiedEgress(opts Options) []networkingv1.NetworkPolicyEgressRule {
	if opts.Egress != EgressVerified {
		return []networkingv1.NetworkPolicyEgressRule{{}} // one empty rule: everything
	}
	to := []networkingv1.NetworkPolicyPeer{verifiedAgents(), operator(opts)}
	cidrs := append([]string(nil), opts.EgressCIDRs...)
	sort.Strings(cidrs)
	for _, c := range cidrs {
		to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	return []networkingv1.NetworkPolicyEgressRule{{To: to}, dns(opts)}
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
