// Package api is what netpol publishes for others to read. netpol owns no CRD: it reports on
// AgentCards (agentcard's resource) with one condition of its own, NetworkPolicyReady, and labels
// the NetworkPolicies it writes. Tools and the other pillars read the condition's type and reasons
// from here, as they read another pillar's from its api/v1alpha1.
package api

// Name is netpol's name on the API server: its field manager (policies and its condition on
// AgentCards), the value of app.kubernetes.io/managed-by on its NetworkPolicies, and the reporting
// controller of its Events.
const Name = "kagenti-netpol"

// ConditionNetworkPolicyReady is the condition netpol owns on an AgentCard: True when the card's
// NetworkPolicy is in place (the reason says which kind), False when netpol cannot write it. It is
// not the AgentCard's Ready (agentcard's), so it never makes a card read as failed to kstatus or
// Argo CD; it is the answer to "is this agent fenced as its verdict says?".
const ConditionNetworkPolicyReady = "NetworkPolicyReady"

// Reasons of NetworkPolicyReady. The pkg/duck target reasons (ReasonTargetNotFound,
// ReasonUnsupportedKind, ReasonInvalidTargetRef) come with False when the card's workload cannot be
// resolved.
const (
	// ReasonPermissive (True): the card is verified; its pods may talk to other verified agents.
	ReasonPermissive = "PermissivePolicyApplied"
	// ReasonRestrictive (True): the card is not verified (yet); its pods reach only DNS and are
	// reached only from the operator namespace.
	ReasonRestrictive = "RestrictivePolicyApplied"
	// ReasonAuditMode (False): --mode=audit; the message says what would be written.
	ReasonAuditMode = "AuditMode"
	// ReasonPolicyConflict (False): a NetworkPolicy of that name exists and is not this card's; it
	// is left alone until renamed or deleted, or the card points elsewhere.
	ReasonPolicyConflict = "PolicyConflict"
	// ReasonInvalidSelector (False): spec.selector is missing, empty (it would select the whole
	// namespace) or invalid.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonInvalidAgentCard (False): a field netpol reads has the wrong shape.
	ReasonInvalidAgentCard = "InvalidAgentCard"
)
