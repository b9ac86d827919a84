package verify_test

import (
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// signedBy returns the weather card signed by an SVID of spiffeID, and the trust bundle of its CA.
func signedBy(t *testing.T, trustDomain, spiffeID string) ([]byte, *signature.Bundle) {
	t.Helper()
	ca, err := devca.NewCA(trustDomain, time.Hour)
	require.NoError(t, err)
	svid, err := ca.NewSVID(spiffeID, devca.SVIDOptions{})
	require.NoError(t, err)
	body, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: svid.Key, Chain: svid.Chain})
	require.NoError(t, err)
	bundle, err := signature.ParseBundle(spiffeid.RequireTrustDomainFromString(trustDomain), devca.CertPEM(ca.Cert))
	require.NoError(t, err)
	return body, bundle
}

// workload is the identity of service account agent in namespace shared, in cluster.local.
var workload = verify.Identity{TrustDomain: "cluster.local", Namespace: "shared", ServiceAccount: "agent"}

func TestCardSignedByTheWorkloadIdentityIsVerified(t *testing.T) {
	body, bundle := signedBy(t, "cluster.local", "spiffe://cluster.local/ns/shared/sa/agent")
	v, err := verify.Card(verify.Input{Card: body, Bundle: bundle, Identity: workload})
	require.NoError(t, err)
	assert.True(t, v.Verified(), "%+v", v)
	assert.Equal(t, "spiffe://cluster.local/ns/shared/sa/agent", v.Signature.SpiffeID)
	assert.Equal(t, "spiffe://cluster.local/ns/shared/sa/agent", v.Binding.Expected)
	reason, msg := v.Cause()
	assert.Equal(t, v1alpha1.ReasonVerified, reason)
	assert.Contains(t, msg, "spiffe://cluster.local/ns/shared/sa/agent")
}

// Signatures carried apart from the card (a federation member sends the card and its JWS) verify
// the card as served without them, and nothing else.
func TestDetachedSignaturesVerifyTheCardTheyWereMadeFor(t *testing.T) {
	body, bundle := signedBy(t, "cluster.local", "spiffe://cluster.local/ns/shared/sa/agent")
	signed, err := card.Parse(body)
	require.NoError(t, err)
	require.Len(t, signed.Signatures, 1)

	v, err := verify.Card(verify.Input{Card: testcards.Weather("1.0.0"), Signatures: signed.Signatures, Bundle: bundle, Identity: workload})
	require.NoError(t, err)
	assert.True(t, v.Verified(), "%+v", v)

	v, err = verify.Card(verify.Input{Card: testcards.Weather("2.0.0"), Signatures: signed.Signatures, Bundle: bundle, Identity: workload})
	require.NoError(t, err)
	assert.False(t, v.Verified())
	assert.Equal(t, signature.ReasonInvalidSignature, v.Signature.Reason)

	v, err = verify.Card(verify.Input{Card: body, Signatures: []card.Signature{}, Bundle: bundle, Identity: workload})
	require.NoError(t, err)
	assert.Equal(t, signature.ReasonNoSignature, v.Signature.Reason, "an empty list replaces the card's own signatures")
}

// A signer outside the trust domain the card must be signed in is not bound, however valid its
// signature under the bundle given.
func TestSignerOfAnotherTrustDomainIsNotBound(t *testing.T) {
	body, bundle := signedBy(t, "cluster.local", "spiffe://cluster.local/ns/shared/sa/agent")
	id := workload
	id.TrustDomain = "member-a.example"
	v, err := verify.Card(verify.Input{Card: body, Bundle: bundle, Identity: id})
	require.NoError(t, err)
	assert.True(t, v.Signature.Verified)
	assert.False(t, v.Verified())
	assert.Equal(t, signature.ReasonTrustDomainMismatch, v.Binding.Reason)
	reason, _ := v.Cause()
	assert.Equal(t, signature.ReasonTrustDomainMismatch, reason)
}

// An identity of another namespace is bound only when the rules allow it; the refusal is the
// verdict's cause, before the signature's own result.
func TestIdentityOfAnotherNamespaceNeedsTheRules(t *testing.T) {
	other := "spiffe://cluster.local/ns/other/sa/agent"
	body, bundle := signedBy(t, "cluster.local", other)
	id := workload
	id.SpiffeID = other
	v, err := verify.Card(verify.Input{Card: body, Bundle: bundle, Identity: id})
	require.NoError(t, err)
	assert.False(t, v.Verified())
	assert.Equal(t, signature.ReasonIdentityNotAllowed, v.Binding.Reason)
	reason, msg := v.Cause()
	assert.Equal(t, signature.ReasonIdentityNotAllowed, reason)
	assert.Contains(t, msg, "--cross-namespace-identities")

	v, err = verify.Card(verify.Input{Card: body, Bundle: bundle, Identity: id,
		Rules: signature.IdentityRules{CrossNamespace: []string{"spiffe://cluster.local/ns/other/sa/*"}}})
	require.NoError(t, err)
	assert.True(t, v.Verified(), "%+v", v)
}

// A card signed by the wrong service account of the right namespace is not bound.
func TestSignerOfAnotherServiceAccountIsNotBound(t *testing.T) {
	body, bundle := signedBy(t, "cluster.local", "spiffe://cluster.local/ns/shared/sa/intruder")
	v, err := verify.Card(verify.Input{Card: body, Bundle: bundle, Identity: workload})
	require.NoError(t, err)
	assert.False(t, v.Verified())
	assert.Equal(t, signature.ReasonIdentityMismatch, v.Binding.Reason)
}

func TestNoBundleVerifiesNothing(t *testing.T) {
	body, _ := signedBy(t, "cluster.local", "spiffe://cluster.local/ns/shared/sa/agent")
	v, err := verify.Card(verify.Input{Card: body, Identity: workload})
	require.NoError(t, err)
	assert.False(t, v.Verified())
	assert.Equal(t, signature.ReasonNoTrustBundle, v.Signature.Reason)
	reason, _ := v.Cause()
	assert.Equal(t, signature.ReasonNoTrustBundle, reason, "an unverified signature is the cause, not the binding that follows from it")
}

// The verification time is an input: a certificate valid now is expired at a later Now.
func TestVerificationTimeIsAnInput(t *testing.T) {
	body, bundle := signedBy(t, "cluster.local", "spiffe://cluster.local/ns/shared/sa/agent")
	v, err := verify.Card(verify.Input{Card: body, Bundle: bundle, Identity: workload, Now: time.Now().Add(48 * time.Hour)})
	require.NoError(t, err)
	assert.Equal(t, signature.ReasonCertificateExpired, v.Signature.Reason)
}

func TestInvalidCardIsAnErrorNamingTheField(t *testing.T) {
	_, err := verify.Card(verify.Input{Card: []byte(`{"name":"x","version":"1","url":"not a url"}`), Identity: workload})
	require.Error(t, err)
	var invalid *card.InvalidError
	require.ErrorAs(t, err, &invalid)
	assert.NotEmpty(t, invalid.Field, err.Error())

	_, err = verify.Card(verify.Input{Card: []byte(`not json`), Identity: workload})
	require.Error(t, err)
}
