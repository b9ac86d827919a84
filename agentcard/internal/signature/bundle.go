// Package signature verifies A2A agent card signatures (JWS with detached, RFC 8785-canonical
// payload and an x5c chain of a SPIFFE X.509 SVID), binds the signer to a workload identity, and
// signs cards.
package signature

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Bundle is a parsed trust bundle: the X.509 authorities of one trust domain.
type Bundle struct {
	TrustDomain spiffeid.TrustDomain
	X509        *x509bundle.Bundle
	// Hash identifies the bundle content, so a rotation invalidates cached verifications.
	Hash string
}

// ParseBundle reads a trust bundle for trust domain td. It accepts PEM certificates (SPIRE's
// k8sbundle notifier writes bundle.crt that way) and SPIFFE JSON bundles (JWKS with x509-svid keys).
func ParseBundle(td spiffeid.TrustDomain, data []byte) (*Bundle, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("trust bundle is empty")
	}
	var xb *x509bundle.Bundle
	if data[0] == '{' {
		sb, err := spiffebundle.Parse(td, data)
		if err != nil {
			return nil, fmt.Errorf("parsing SPIFFE JSON bundle: %w", err)
		}
		if len(sb.X509Authorities()) == 0 {
			return nil, errors.New("SPIFFE JSON bundle has no x509-svid authorities")
		}
		xb = sb.X509Bundle()
	} else {
		certs, err := parsePEMCerts(data)
		if err != nil {
			return nil, err
		}
		xb = x509bundle.FromX509Authorities(td, certs)
	}
	h := sha256.New()
	for _, c := range xb.X509Authorities() {
		h.Write(c.Raw)
	}
	return &Bundle{TrustDomain: td, X509: xb, Hash: hex.EncodeToString(h.Sum(nil))[:16]}, nil
}

func parsePEMCerts(data []byte) ([]*x509.Certificate, error) {
	certs, err := PEMCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("parsing trust bundle certificate: %w", err)
	}
	if len(certs) == 0 {
		return nil, errors.New("trust bundle has no PEM CERTIFICATE blocks")
	}
	return certs, nil
}

// PEMCertificates parses the CERTIFICATE blocks of data, in order, skipping blocks of other types;
// none is an empty result, for the caller to judge. The error is x509's, without context.
func PEMCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certs, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
}
