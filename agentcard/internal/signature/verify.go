package signature

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/kagenti/platform/agentcard/internal/card"
)

// Reasons why a card is not verified (CamelCase: used as condition reasons).
const (
	ReasonVerified             = "Verified"
	ReasonNoSignature          = "NoSignature"
	ReasonNoTrustBundle        = "NoTrustBundle"
	ReasonMalformedSignature   = "MalformedSignature"
	ReasonUnsupportedAlgorithm = "UnsupportedAlgorithm"
	ReasonUnknownKey           = "UnknownKey"
	ReasonKeyAlgorithmMismatch = "KeyAlgorithmMismatch"
	ReasonWeakKey              = "WeakKey"
	ReasonInvalidSignature     = "InvalidSignature"
	ReasonCertificateExpired   = "CertificateExpired"
	ReasonUntrustedChain       = "UntrustedCertificateChain"
	ReasonInvalidSVID          = "InvalidSVID"
)

// AllowedAlgorithms is the JWS alg allow-list; "none" and HMAC algorithms are never accepted.
var AllowedAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512,
}

// MinRSABits is the smallest RSA modulus accepted.
const MinRSABits = 2048

// Result is the outcome of verifying a card's signatures.
type Result struct {
	Verified  bool
	KeyID     string
	Algorithm string
	// SpiffeID is the signer's identity, proven by the x5c chain.
	SpiffeID string
	Reason   string
	Message  string
}

// Verifier checks signatures against a trust bundle at the current time.
type Verifier struct {
	Bundle *Bundle
	// Now returns the verification time; nil means time.Now.
	Now func() time.Time
}

type protectedHeader struct {
	Alg string   `json:"alg"`
	Kid string   `json:"kid"`
	Typ string   `json:"typ"`
	X5c []string `json:"x5c"`
}

// Verify returns the result of the first valid signature, or the failure of the last one tried.
func (v *Verifier) Verify(c *card.Card) Result {
	if len(c.Signatures) == 0 {
		return fail(ReasonNoSignature, "the card has no signatures")
	}
	if v.Bundle == nil {
		return fail(ReasonNoTrustBundle, "no trust bundle is loaded; cannot verify x5c chains")
	}
	var last Result
	for i, s := range c.Signatures {
		r := v.verifyOne(c.Payload, s)
		if r.Verified {
			return r
		}
		r.Message = fmt.Sprintf("signatures[%d]: %s", i, r.Message)
		last = r
	}
	return last
}

func (v *Verifier) verifyOne(payload []byte, s card.Signature) Result {
	rawHeader, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s.Protected, "="))
	if err != nil {
		return fail(ReasonMalformedSignature, "protected header is not base64url: %v", err)
	}
	var h protectedHeader
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return fail(ReasonMalformedSignature, "protected header is not JSON: %v", err)
	}
	if !allowed(h.Alg) {
		return fail(ReasonUnsupportedAlgorithm, "alg %q is not allowed (allowed: RS256/384/512, PS256/384/512, ES256/384/512)", h.Alg)
	}
	res := Result{KeyID: h.Kid, Algorithm: h.Alg}
	if len(h.X5c) == 0 {
		return res.fail(ReasonUnknownKey, "kid %q cannot be resolved: the protected header carries no x5c certificate chain", h.Kid)
	}
	chain := make([]*x509.Certificate, 0, len(h.X5c))
	for i, b64 := range h.X5c {
		der, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return res.fail(ReasonMalformedSignature, "x5c[%d] is not base64: %v", i, err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return res.fail(ReasonMalformedSignature, "x5c[%d] is not a certificate: %v", i, err)
		}
		chain = append(chain, cert)
	}
	leaf := chain[0]
	if r, ok := checkKey(h.Alg, leaf); !ok {
		r.KeyID, r.Algorithm = h.Kid, h.Alg
		return r
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	// Expiry first, so an expired SVID reports CertificateExpired rather than a generic chain error.
	for i, cert := range chain {
		if now.After(cert.NotAfter) {
			return res.fail(ReasonCertificateExpired, "x5c[%d] (%s) expired at %s", i, cert.Subject, cert.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(cert.NotBefore) {
			return res.fail(ReasonCertificateExpired, "x5c[%d] (%s) is not valid before %s", i, cert.Subject, cert.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	if len(leaf.URIs) != 1 {
		return res.fail(ReasonInvalidSVID, "the leaf certificate must have exactly one URI SAN (a SPIFFE ID), it has %d", len(leaf.URIs))
	}
	id, _, err := x509svid.Verify(chain, v.Bundle.X509, x509svid.WithTime(now))
	if err != nil {
		reason := ReasonUntrustedChain
		if _, perr := spiffeid.FromURI(leaf.URIs[0]); perr != nil {
			reason = ReasonInvalidSVID
		}
		return res.fail(reason, "x5c chain does not verify against the trust bundle of %q: %v", v.Bundle.TrustDomain.Name(), err)
	}
	res.SpiffeID = id.String()
	compact := s.Protected + ".." + s.Signature
	jws, err := jose.ParseDetached(compact, payload, AllowedAlgorithms)
	if err != nil {
		return res.fail(ReasonMalformedSignature, "parsing JWS: %v", err)
	}
	if _, err := jws.Verify(leaf.PublicKey); err != nil {
		return res.fail(ReasonInvalidSignature, "signature does not match the canonical card: %v", err)
	}
	res.Verified, res.Reason, res.Message = true, ReasonVerified, "signed by "+res.SpiffeID
	return res
}

// checkKey rejects a leaf key that does not fit the alg or is too weak.
func checkKey(alg string, leaf *x509.Certificate) (Result, bool) {
	switch k := leaf.PublicKey.(type) {
	case *rsa.PublicKey:
		if !strings.HasPrefix(alg, "RS") && !strings.HasPrefix(alg, "PS") {
			return fail(ReasonKeyAlgorithmMismatch, "alg %s does not fit an RSA key", alg), false
		}
		if k.N.BitLen() < MinRSABits {
			return fail(ReasonWeakKey, "RSA key of %d bits; at least %d required", k.N.BitLen(), MinRSABits), false
		}
	case *ecdsa.PublicKey:
		want := map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}[alg]
		if want == nil || k.Curve != want {
			return fail(ReasonKeyAlgorithmMismatch, "alg %s does not fit an ECDSA %s key", alg, k.Curve.Params().Name), false
		}
	default:
		return fail(ReasonKeyAlgorithmMismatch, "unsupported key type %T for alg %s", leaf.PublicKey, alg), false
	}
	return Result{}, true
}

func allowed(alg string) bool {
	for _, a := range AllowedAlgorithms {
		if string(a) == alg {
			return true
		}
	}
	return false
}

func fail(reason, format string, args ...any) Result {
	return Result{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func (r Result) fail(reason, format string, args ...any) Result {
	r.Verified, r.Reason, r.Message = false, reason, fmt.Sprintf(format, args...)
	return r
}

// ErrNoKey is returned by Sign when no key is given.
var ErrNoKey = errors.New("no signing key")
