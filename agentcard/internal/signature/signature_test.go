package signature_test

import (
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

const td = "cluster.local"
const agentID = "spiffe://cluster.local/ns/agents/sa/weather-agent"

type fixture struct {
	ca     *devca.CA
	bundle *signature.Bundle
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ca, err := devca.NewCA(td, 24*time.Hour)
	require.NoError(t, err)
	b, err := signature.ParseBundle(spiffeid.RequireTrustDomainFromString(td), devca.CertPEM(ca.Cert))
	require.NoError(t, err)
	return fixture{ca: ca, bundle: b}
}

func (f fixture) sign(t *testing.T, id string, o devca.SVIDOptions, alg jose.SignatureAlgorithm) []byte {
	t.Helper()
	svid, err := f.ca.NewSVID(id, o)
	require.NoError(t, err)
	signed, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: svid.Key, Chain: svid.Chain, Algorithm: alg})
	require.NoError(t, err)
	return signed
}

func verify(t *testing.T, b *signature.Bundle, raw []byte) signature.Result {
	t.Helper()
	c, err := card.Parse(raw)
	require.NoError(t, err)
	return (&signature.Verifier{Bundle: b}).Verify(c)
}

// editProtected rewrites the protected header of the first signature (keeping the signature).
func editProtected(t *testing.T, raw []byte, f func(h map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	sig := m["signatures"].([]any)[0].(map[string]any)
	hb, err := base64.RawURLEncoding.DecodeString(sig["protected"].(string))
	require.NoError(t, err)
	var h map[string]any
	require.NoError(t, json.Unmarshal(hb, &h))
	f(h)
	nb, _ := json.Marshal(h)
	sig["protected"] = base64.RawURLEncoding.EncodeToString(nb)
	return testcards.Must(m)
}

func TestVerify(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t)
	valid := f.sign(t, agentID, devca.SVIDOptions{}, "")

	tampered := func() []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(valid, &m))
		m["version"] = "6.6.6"
		return testcards.Must(m)
	}()
	noneAlg := editProtected(t, valid, func(h map[string]any) { h["alg"] = "none" })
	hsAlg := editProtected(t, valid, func(h map[string]any) { h["alg"] = "HS256" })
	headerTampered := editProtected(t, valid, func(h map[string]any) { h["kid"] = "someone-else" })
	wrongAlg := editProtected(t, valid, func(h map[string]any) { h["alg"] = "RS256" })
	noX5c := editProtected(t, valid, func(h map[string]any) { delete(h, "x5c"); h["kid"] = "unknown-key" })
	notJWS := func() []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(valid, &m))
		m["signatures"] = []any{map[string]any{"protected": "!!!", "signature": "x"}}
		return testcards.Must(m)
	}()

	cases := []struct {
		name   string
		raw    []byte
		bundle *signature.Bundle
		reason string
	}{
		{"valid ES256", valid, f.bundle, signature.ReasonVerified},
		{"valid RS256", f.sign(t, agentID, devca.SVIDOptions{RSABits: 2048}, ""), f.bundle, signature.ReasonVerified},
		{"valid PS384", f.sign(t, agentID, devca.SVIDOptions{RSABits: 2048}, jose.PS384), f.bundle, signature.ReasonVerified},
		{"valid ES384", f.sign(t, agentID, devca.SVIDOptions{Curve: elliptic.P384()}, ""), f.bundle, signature.ReasonVerified},
		{"no signature", testcards.Weather("1"), f.bundle, signature.ReasonNoSignature},
		{"no trust bundle", valid, nil, signature.ReasonNoTrustBundle},
		{"tampered payload", tampered, f.bundle, signature.ReasonInvalidSignature},
		{"tampered header", headerTampered, f.bundle, signature.ReasonInvalidSignature},
		{"alg none", noneAlg, f.bundle, signature.ReasonUnsupportedAlgorithm},
		{"alg HS256", hsAlg, f.bundle, signature.ReasonUnsupportedAlgorithm},
		{"wrong alg for key", wrongAlg, f.bundle, signature.ReasonKeyAlgorithmMismatch},
		{"ES384 header on P-256 key", editProtected(t, valid, func(h map[string]any) { h["alg"] = "ES384" }), f.bundle, signature.ReasonKeyAlgorithmMismatch},
		{"short RSA key", f.sign(t, agentID, devca.SVIDOptions{RSABits: 1024}, ""), f.bundle, signature.ReasonWeakKey},
		{"unknown kid without x5c", noX5c, f.bundle, signature.ReasonUnknownKey},
		{"malformed", notJWS, f.bundle, signature.ReasonMalformedSignature},
		{"chain to another CA", valid, other.bundle, signature.ReasonUntrustedChain},
		{"expired SVID", f.sign(t, agentID, devca.SVIDOptions{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, ""), f.bundle, signature.ReasonCertificateExpired},
		{"two URI SANs", f.sign(t, agentID, devca.SVIDOptions{ExtraURIs: []string{"spiffe://cluster.local/ns/agents/sa/other"}}, ""), f.bundle, signature.ReasonInvalidSVID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := verify(t, c.bundle, c.raw)
			assert.Equal(t, c.reason, r.Reason, r.Message)
			assert.Equal(t, c.reason == signature.ReasonVerified, r.Verified)
			if r.Verified {
				assert.Equal(t, agentID, r.SpiffeID)
				assert.Equal(t, agentID, r.KeyID)
			}
		})
	}
}

func TestVerifyAnyOfSeveralSignatures(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t)
	bad, err := other.ca.NewSVID(agentID, devca.SVIDOptions{})
	require.NoError(t, err)
	good, err := f.ca.NewSVID(agentID, devca.SVIDOptions{})
	require.NoError(t, err)
	once, err := signature.Sign(testcards.Weather("1"), signature.SignOptions{Key: bad.Key, Chain: bad.Chain})
	require.NoError(t, err)
	twice, err := signature.Sign(once, signature.SignOptions{Key: good.Key, Chain: good.Chain})
	require.NoError(t, err)
	assert.True(t, verify(t, f.bundle, twice).Verified)
}

func TestParseBundleFormats(t *testing.T) {
	f := newFixture(t)
	trust := spiffeid.RequireTrustDomainFromString(td)
	valid := f.sign(t, agentID, devca.SVIDOptions{}, "")

	// Fill x/y from the CA key via go-jose, as SPIRE does.
	jwk := jose.JSONWebKey{Key: f.ca.Cert.PublicKey, Certificates: []*x509.Certificate{f.ca.Cert}, Use: "x509-svid"}
	jb, err := jwk.MarshalJSON()
	require.NoError(t, err)
	var jm map[string]any
	require.NoError(t, json.Unmarshal(jb, &jm))
	jwks := map[string]any{"keys": []any{jm}}
	b, err := signature.ParseBundle(trust, testcards.Must(jwks))
	require.NoError(t, err)
	assert.True(t, verify(t, b, valid).Verified)

	_, err = signature.ParseBundle(trust, []byte("  "))
	assert.ErrorContains(t, err, "empty")
	_, err = signature.ParseBundle(trust, []byte("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"))
	assert.ErrorContains(t, err, "no PEM CERTIFICATE")
	_, err = signature.ParseBundle(trust, []byte(`{"keys":[]}`))
	assert.Error(t, err)
}

func TestBinding(t *testing.T) {
	verified := signature.Result{Verified: true, SpiffeID: agentID}
	rules := signature.IdentityRules{}
	expected, idErr := rules.ExpectedIdentity("", td, "agents", "weather-agent")
	require.Nil(t, idErr)
	assert.Equal(t, agentID, expected)
	def, idErr := rules.ExpectedIdentity("", td, "agents", "")
	require.Nil(t, idErr)
	assert.Equal(t, "spiffe://cluster.local/ns/agents/sa/default", def)

	cases := []struct {
		name     string
		result   signature.Result
		expected string
		reason   string
	}{
		{"own identity", verified, expected, signature.ReasonBound},
		{"same trust domain, wrong service account", signature.Result{Verified: true, SpiffeID: "spiffe://cluster.local/ns/agents/sa/travel-agent"}, expected, signature.ReasonIdentityMismatch},
		{"same SA name, other namespace", signature.Result{Verified: true, SpiffeID: "spiffe://cluster.local/ns/other/sa/weather-agent"}, expected, signature.ReasonIdentityMismatch},
		{"other trust domain", signature.Result{Verified: true, SpiffeID: "spiffe://evil.example/ns/agents/sa/weather-agent"}, expected, signature.ReasonTrustDomainMismatch},
		{"unverified", signature.Result{Reason: signature.ReasonNoSignature}, expected, signature.ReasonNotVerified},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := signature.Bind(c.result, c.expected, td)
			assert.Equal(t, c.reason, b.Reason, b.Message)
			assert.Equal(t, c.reason == signature.ReasonBound, b.Bound)
			assert.Equal(t, expected, b.Expected)
		})
	}
}

// spec.identityBinding.spiffeID is parsed by go-spiffe and must name an identity of the
// AgentCard's own namespace, unless a --cross-namespace-identities pattern allows it.
func TestExpectedIdentityRules(t *testing.T) {
	rules := signature.IdentityRules{CrossNamespace: []string{"spiffe://cluster.local/ns/shared-*/sa/*", "spiffe://cluster.local/gateway"}}
	require.NoError(t, rules.Validate())
	for _, c := range []struct {
		spiffeID, reason string
	}{
		{"spiffe://cluster.local/ns/agents/sa/other", ""},
		{"spiffe://cluster.local/ns/agents/anything/else", ""},
		{"spiffe://cluster.local/ns/payments/sa/payments-agent", signature.ReasonIdentityNotAllowed},
		{"spiffe://cluster.local/ns/agents-x/sa/a", signature.ReasonIdentityNotAllowed},
		{"spiffe://cluster.local/agents", signature.ReasonIdentityNotAllowed},
		{"spiffe://cluster.local/ns/shared-tools/sa/search", ""},
		{"spiffe://cluster.local/ns/shared-tools/sa/search/x", signature.ReasonIdentityNotAllowed},
		{"spiffe://cluster.local/gateway", ""},
		{"spiffe://UP PER/../x", signature.ReasonInvalidSpiffeID},
		{"spiffe://cluster.local/ns/agents/sa/..", signature.ReasonInvalidSpiffeID},
		{"spiffe://cluster.local/ns/agents/sa/a/", signature.ReasonInvalidSpiffeID},
		{"http://x", signature.ReasonInvalidSpiffeID},
	} {
		t.Run(c.spiffeID, func(t *testing.T) {
			id, err := rules.ExpectedIdentity(c.spiffeID, td, "agents", "a")
			if c.reason == "" {
				require.Nil(t, err)
				assert.Equal(t, c.spiffeID, id)
				return
			}
			require.NotNil(t, err)
			assert.Equal(t, c.reason, err.Reason, err.Message)
			assert.Contains(t, err.Message, "spec.identityBinding.spiffeID")
		})
	}
	_, err := signature.IdentityRules{}.ExpectedIdentity("spiffe://cluster.local/ns/payments/sa/payments-agent", td, "atk", "a")
	require.NotNil(t, err)
	assert.Contains(t, err.Message, "is an identity of namespace payments")
	assert.Contains(t, err.Message, "own namespace (atk)")
	assert.Error(t, signature.IdentityRules{CrossNamespace: []string{"spiffe://x/["}}.Validate())
	assert.Error(t, signature.IdentityRules{CrossNamespace: []string{"*"}}.Validate())
}

func TestSignRejectsBadInput(t *testing.T) {
	_, err := signature.Sign([]byte("{}"), signature.SignOptions{})
	assert.ErrorIs(t, err, signature.ErrNoKey)
	f := newFixture(t)
	svid, err := f.ca.NewSVID(agentID, devca.SVIDOptions{})
	require.NoError(t, err)
	_, err = signature.Sign([]byte("nope"), signature.SignOptions{Key: svid.Key, Chain: svid.Chain})
	assert.True(t, err != nil && strings.Contains(err.Error(), "JSON"))
}
