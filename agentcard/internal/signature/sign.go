package signature

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/go-jose/go-jose/v4"

	"github.com/kagenti/platform/agentcard/internal/card"
)

// SignOptions configure Sign.
type SignOptions struct {
	// Key signs; its type picks the default alg (ES256/384/512 by curve, RS256 for RSA).
	Key crypto.Signer
	// Chain is the x5c chain, leaf first (the SVID, then any intermediates).
	Chain []*x509.Certificate
	// KeyID is the kid header; defaults to the leaf's SPIFFE ID.
	KeyID string
	// Algorithm overrides the default alg.
	Algorithm jose.SignatureAlgorithm
}

// Sign returns cardJSON with one A2A signature appended to its "signatures": a JWS over the RFC
// 8785 canonical card without signatures, detached, with alg, kid, typ and x5c protected.
func Sign(cardJSON []byte, o SignOptions) ([]byte, error) {
	if o.Key == nil {
		return nil, ErrNoKey
	}
	if len(o.Chain) == 0 {
		return nil, fmt.Errorf("no certificate chain: x5c must carry the signer's SVID")
	}
	var obj map[string]any
	dec := json.NewDecoder(strings.NewReader(string(cardJSON)))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("card is not a JSON object: %w", err)
	}
	payload, err := card.CanonicalPayload(obj)
	if err != nil {
		return nil, err
	}
	alg := o.Algorithm
	if alg == "" {
		alg, err = defaultAlgorithm(o.Key.Public())
		if err != nil {
			return nil, err
		}
	}
	kid := o.KeyID
	if kid == "" && len(o.Chain[0].URIs) > 0 {
		kid = o.Chain[0].URIs[0].String()
	}
	x5c := make([]string, len(o.Chain))
	for i, c := range o.Chain {
		x5c[i] = base64.StdEncoding.EncodeToString(c.Raw)
	}
	opts := (&jose.SignerOptions{}).WithType("JOSE").WithHeader("kid", kid).WithHeader("x5c", x5c)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: o.Key}, opts)
	if err != nil {
		return nil, fmt.Errorf("creating %s signer: %w", alg, err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return nil, err
	}
	compact, err := jws.DetachedCompactSerialize()
	if err != nil {
		return nil, err
	}
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("unexpected JWS serialization")
	}
	sigs, _ := obj["signatures"].([]any)
	obj["signatures"] = append(sigs, map[string]any{"protected": parts[0], "signature": parts[2]})
	return json.MarshalIndent(obj, "", "  ")
}

func defaultAlgorithm(pub crypto.PublicKey) (jose.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
	case *rsa.PublicKey:
		return jose.RS256, nil
	}
	return "", fmt.Errorf("unsupported key type %T", pub)
}
