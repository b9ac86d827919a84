package signature

import (
	"fmt"
	"path"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Binding reasons.
const (
	ReasonBound               = "Bound"
	ReasonNotVerified         = "SignatureNotVerified"
	ReasonTrustDomainMismatch = "TrustDomainMismatch"
	ReasonIdentityMismatch    = "IdentityMismatch"
	ReasonNoExpectedIdentity  = "NoExpectedIdentity"
	// ReasonInvalidSpiffeID: spec.identityBinding.spiffeID is not a SPIFFE ID (go-spiffe rejects it).
	ReasonInvalidSpiffeID = "InvalidSpiffeID"
	// ReasonIdentityNotAllowed: spec.identityBinding.spiffeID names an identity outside the
	// AgentCard's namespace that the administrator did not allow.
	ReasonIdentityNotAllowed = "IdentityNotAllowed"
)

// BindingResult says whether the signer is the identity the workload must have.
type BindingResult struct {
	Bound    bool
	Expected string
	Reason   string
	Message  string
}

// IdentityError is why no identity can be expected of a card's signer; the AgentCard's spec (or
// the controller's configuration) must change.
type IdentityError struct {
	Reason  string
	Message string
}

func (e *IdentityError) Error() string { return e.Message }

// IdentityRules says which identities an AgentCard may ask its signer to have.
type IdentityRules struct {
	// CrossNamespace are patterns (path.Match syntax, where * does not cross a '/') of SPIFFE IDs
	// that an AgentCard of any namespace may bind. Empty: an AgentCard binds only identities of its
	// own namespace, spiffe://<trust domain>/ns/<namespace>/....
	CrossNamespace []string
}

// Validate rejects malformed patterns.
func (r IdentityRules) Validate() error {
	for _, p := range r.CrossNamespace {
		if !strings.HasPrefix(p, "spiffe://") {
			return fmt.Errorf("%q is not a SPIFFE ID pattern (spiffe://<trust domain>/<path>, * matches within one path segment)", p)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
	}
	return nil
}

// ExpectedIdentity is the SPIFFE ID a card must be signed by: spiffeID when set, otherwise the
// workload identity spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount>. A spiffeID must
// parse as a SPIFFE ID and belong to namespace (the AgentCard's), unless the rules allow it.
func (r IdentityRules) ExpectedIdentity(spiffeID, trustDomain, namespace, serviceAccount string) (string, *IdentityError) {
	if spiffeID != "" {
		id, err := spiffeid.FromString(spiffeID)
		if err != nil {
			return "", &IdentityError{Reason: ReasonInvalidSpiffeID, Message: fmt.Sprintf("spec.identityBinding.spiffeID %q is not a SPIFFE ID: %v", spiffeID, err)}
		}
		if err := r.allowed(id, namespace); err != nil {
			return "", err
		}
		return id.String(), nil
	}
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return "", &IdentityError{Reason: ReasonNoExpectedIdentity, Message: fmt.Sprintf("trust domain %q: %v", trustDomain, err)}
	}
	id, err := spiffeid.FromSegments(td, "ns", namespace, "sa", serviceAccount)
	if err != nil {
		return "", &IdentityError{Reason: ReasonNoExpectedIdentity, Message: fmt.Sprintf("no SPIFFE ID for service account %q of namespace %q: %v", serviceAccount, namespace, err)}
	}
	return id.String(), nil
}

// allowed applies the namespace rule: an AgentCard in namespace N may bind spiffe://<td>/ns/N/...
// (the Kubernetes workload identity layout SPIRE uses), and other identities only when an
// administrator listed them. Otherwise any namespace could claim another's identity by replaying
// its signed card.
func (r IdentityRules) allowed(id spiffeid.ID, namespace string) *IdentityError {
	segs := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	if len(segs) >= 2 && segs[0] == "ns" && segs[1] == namespace {
		return nil
	}
	for _, p := range r.CrossNamespace {
		if ok, _ := path.Match(p, id.String()); ok {
			return nil
		}
	}
	where := "is not a workload identity of any namespace (spiffe://<trust domain>/ns/<namespace>/...)"
	if len(segs) >= 2 && segs[0] == "ns" {
		where = "is an identity of namespace " + segs[1]
	}
	return &IdentityError{Reason: ReasonIdentityNotAllowed, Message: fmt.Sprintf(
		"spec.identityBinding.spiffeID %s %s; an AgentCard may only bind identities of its own namespace (%s) unless an administrator allows the identity with --cross-namespace-identities",
		id, where, namespace)}
}

// Bind compares a verification result with the expected identity and trust domain.
func Bind(v Result, expected, trustDomain string) BindingResult {
	b := BindingResult{Expected: expected}
	if !v.Verified {
		b.Reason, b.Message = ReasonNotVerified, "no verified signature: "+v.Reason
		return b
	}
	if expected == "" {
		b.Reason, b.Message = ReasonNoExpectedIdentity, "no expected identity could be derived"
		return b
	}
	signer, err := spiffeid.FromString(v.SpiffeID)
	if err != nil {
		b.Reason, b.Message = ReasonIdentityMismatch, fmt.Sprintf("signer %q is not a SPIFFE ID", v.SpiffeID)
		return b
	}
	if trustDomain != "" && signer.TrustDomain().Name() != trustDomain {
		b.Reason = ReasonTrustDomainMismatch
		b.Message = fmt.Sprintf("signer %s is not in trust domain %q", signer, trustDomain)
		return b
	}
	if signer.String() != expected {
		b.Reason = ReasonIdentityMismatch
		b.Message = fmt.Sprintf("card signed by %s, but this workload's identity is %s", signer, expected)
		return b
	}
	b.Bound, b.Reason, b.Message = true, ReasonBound, "signed by the workload's own identity "+expected
	return b
}
