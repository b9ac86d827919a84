// Package devca mints a development SPIFFE CA and X.509 SVIDs, so tests, the local cluster and
// users without SPIRE can produce signed agent cards. Not for production identities.
package devca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"time"

	"github.com/kagenti/platform/agentcard/internal/signature"
)

// CA is a certificate authority for one trust domain.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// SVID is a leaf certificate with its key; Chain is leaf first (no root).
type SVID struct {
	Cert  *x509.Certificate
	Key   crypto.Signer
	Chain []*x509.Certificate
}

// SVIDOptions tune a minted SVID; the zero value gives a valid ECDSA P-256 SVID for one hour.
type SVIDOptions struct {
	NotBefore, NotAfter time.Time
	// RSABits > 0 uses an RSA key of that size instead of ECDSA P-256.
	RSABits int
	// Curve overrides P-256 for ECDSA keys.
	Curve elliptic.Curve
	// ExtraURIs adds URI SANs (to test that exactly one is required).
	ExtraURIs []string
}

// NewCA creates a self-signed CA for trustDomain valid for ttl.
func NewCA(trustDomain string, ttl time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"kagenti dev CA"}, CommonName: trustDomain},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(ttl),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: trustDomain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// NewSVID issues an X.509 SVID for spiffeID.
func (ca *CA) NewSVID(spiffeID string, o SVIDOptions) (*SVID, error) {
	u, err := url.Parse(spiffeID)
	if err != nil || u.Scheme != "spiffe" {
		return nil, fmt.Errorf("%q is not a SPIFFE ID", spiffeID)
	}
	uris := []*url.URL{u}
	for _, e := range o.ExtraURIs {
		x, err := url.Parse(e)
		if err != nil {
			return nil, err
		}
		uris = append(uris, x)
	}
	var key crypto.Signer
	switch {
	case o.RSABits > 0:
		key, err = rsa.GenerateKey(rand.Reader, o.RSABits)
	default:
		curve := o.Curve
		if curve == nil {
			curve = elliptic.P256()
		}
		key, err = ecdsa.GenerateKey(curve, rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Minute)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"SPIRE"}},
		NotBefore:             o.NotBefore,
		NotAfter:              o.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageKeyAgreement,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &SVID{Cert: cert, Key: key, Chain: []*x509.Certificate{cert}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

// CertPEM encodes certificates as PEM.
func CertPEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// KeyPEM encodes a private key as PKCS#8 PEM.
func KeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// WriteFiles writes cert (chain) and key PEM files.
func WriteFiles(certPath, keyPath string, key crypto.Signer, certs ...*x509.Certificate) error {
	k, err := KeyPEM(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, CertPEM(certs...), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, k, 0o600)
}

// LoadKey reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
func LoadKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("%s: no PEM private key", path)
		}
		switch b.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("%s: key type %T cannot sign", path, k)
			}
			return s, nil
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(b.Bytes)
		}
	}
}

// LoadCerts reads PEM certificates.
func LoadCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out, err := signature.PEMCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": no PEM certificates")
	}
	return out, nil
}

// LoadCA reads a CA written by WriteFiles.
func LoadCA(certPath, keyPath string) (*CA, error) {
	certs, err := LoadCerts(certPath)
	if err != nil {
		return nil, err
	}
	key, err := LoadKey(keyPath)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: certs[0], Key: key}, nil
}
