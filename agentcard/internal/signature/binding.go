package signature

import (
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Binding reasons.
const (
	ReasonBound               = "Bound"
	ReasonNotVerified         = "SignatureNotVerified"
	ReasonTrustDomainMismatch = "TrustDomainMismatch"
	ReasonIdentityMismatch    = "IdentityMismatch"
	ReasonNoExpectedIdentity  = "NoExpectedIdentity"
)

// BindingResult says whether the signer is the identity the workload must have.
type BindingResult struct {
	Bound    bool
	Expected string
	Reason   string
	Message  string
}

// ExpectedIdentity is the SPIFFE ID a card must be signed by: spiffeID when set, otherwise the
// workload identity spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount>.
func ExpectedIdentity(spiffeID, trustDomain, namespace, serviceAccount string) (string, error) {
	if spiffeID != "" {
		id, err := spiffeid.FromString(spiffeID)
		if err != nil {
			return "", fmt.Errorf("identityBinding.spiffeID %q: %w", spiffeID, err)
		}
		return id.String(), nil
	}
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return "", fmt.Errorf("trust domain %q: %w", trustDomain, err)
	}
	id, err := spiffeid.FromSegments(td, "ns", namespace, "sa", serviceAccount)
	if err != nil {
		return "", err
	}
	return id.String(), nil
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
