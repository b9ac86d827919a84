// Package verify decides whether an agent card may be trusted: its JWS signatures verify against a
// trust bundle (package signature does the cryptography), and the signer is the workload identity
// the card may claim (identity binding). It also holds the trust bundle the controller verifies
// with (TrustStore) and the watcher that keeps it current (BundleWatcher).
//
// Card, Signature and Bind are pure functions of their arguments: any holder of a card's bytes,
// its signatures and a trust bundle reaches the verdict the controller reaches, without a
// controller, a cache or an API server (the federation hub re-verifies its members' cards so).
package verify

import (
	"time"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// Identity is what a card's signer must be.
type Identity struct {
	// SpiffeID is the identity an AgentCard names (spec.identityBinding.spiffeID); empty: the
	// workload identity of ServiceAccount in Namespace, in TrustDomain.
	SpiffeID string
	// TrustDomain is the signer's trust domain (spec.identityBinding.trustDomain, else the
	// controller's --trust-domain).
	TrustDomain string
	// Namespace is the AgentCard's namespace: an identity of another namespace is bound only when
	// the IdentityRules allow it.
	Namespace string
	// ServiceAccount is the serving pod's service account ("" is "default").
	ServiceAccount string
}

// Verdict is a card's verification: its signature, and its signer's binding to the identity the
// card may claim.
type Verdict struct {
	Signature signature.Result
	Binding   signature.BindingResult
}

// Verified says whether the card may be trusted: a signature verifies and its signer is bound.
func (v Verdict) Verified() bool {
	return v.Signature.Verified && v.Binding.Bound
}

// Cause is the verdict as an AgentCard's Verified condition states it: ReasonVerified naming the
// signer, or the first cause, where a binding the spec cannot have (IdentityNotAllowed,
// InvalidSpiffeID, ...) comes before the signature's own failure.
func (v Verdict) Cause() (reason, message string) {
	s, b := v.Signature, v.Binding
	switch {
	case s.Verified && b.Bound:
		return v1alpha1.ReasonVerified, "signed by " + s.SpiffeID + ", the identity this card may claim"
	case b.Reason != signature.ReasonNotVerified && b.Reason != "":
		return b.Reason, b.Message
	default:
		return s.Reason, s.Message
	}
}

// Signature verifies a parsed card's signatures against bundle at now (the zero time: the
// current time). A nil bundle verifies nothing (signature.ReasonNoTrustBundle).
func Signature(c *card.Card, bundle *signature.Bundle, now time.Time) signature.Result {
	v := signature.Verifier{Bundle: bundle}
	if !now.IsZero() {
		v.Now = func() time.Time { return now }
	}
	return v.Verify(c)
}

// Bind binds a signature's signer to the identity the card may claim under rules. An identity
// the rules do not allow, or that cannot be derived, is the binding's failure whatever the
// signature.
func Bind(sig signature.Result, id Identity, rules signature.IdentityRules) signature.BindingResult {
	expected, idErr := rules.ExpectedIdentity(id.SpiffeID, id.TrustDomain, id.Namespace, id.ServiceAccount)
	if idErr != nil {
		return signature.BindingResult{Expected: id.SpiffeID, Reason: idErr.Reason, Message: idErr.Message}
	}
	return signature.Bind(sig, expected, id.TrustDomain)
}

// Input is a card to verify and what to verify it against.
type Input struct {
	// Card is the agent card's JSON as served.
	Card []byte
	// Signatures are JWS (A2A AgentCardSignature: protected header and signature over the card's
	// RFC 8785 canonical form without "signatures") carried apart from the card; nil: the card's
	// own signatures[].
	Signatures []card.Signature
	// Bundle is the trust bundle of the signer's trust domain; nil verifies nothing.
	Bundle *signature.Bundle
	// Identity is what the signer must be.
	Identity Identity
	// Rules say which identities of other namespaces a card may claim.
	Rules signature.IdentityRules
	// Now is the verification time; zero: the current time.
	Now time.Time
}

// Card parses in.Card and verifies it. The error is the card's own (card.Parse: not an agent
// card, naming the offending field); a card that does not verify is a Verdict saying why.
func Card(in Input) (Verdict, error) {
	c, err := card.Parse(in.Card)
	if err != nil {
		return Verdict{}, err
	}
	if in.Signatures != nil {
		c.Signatures = in.Signatures
	}
	sig := Signature(c, in.Bundle, in.Now)
	return Verdict{Signature: sig, Binding: Bind(sig, in.Identity, in.Rules)}, nil
}
