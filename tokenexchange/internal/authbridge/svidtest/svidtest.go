// Package svidtest issues X.509 SVIDs from a small in-memory CA per trust domain, for the tests of
// mutual TLS between sidecars, and serves them as a rotating source (what the SPIRE agent's
// Workload API is to the sidecars).
package svidtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// CA is the signing authority of one trust domain.
type CA struct {
	TD   spiffeid.TrustDomain
	cert *x509.Certificate
	key  crypto.Signer
}

// NewCA makes the CA of trust domain td.
func NewCA(t testing.TB, td string) *CA {
	t.Helper()
	key := newKey(t)
	domain := spiffeid.RequireTrustDomainFromString(td)
	uri, _ := url.Parse("spiffe://" + td)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{Organization: []string{"svidtest"}, CommonName: td},
		URIs:                  []*url.URL{uri},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{TD: domain, cert: cert, key: key}
}

// Bundle is the trust domain's X.509 bundle: the CA's certificate.
func (ca *CA) Bundle() *x509bundle.Bundle {
	return x509bundle.FromX509Authorities(ca.TD, []*x509.Certificate{ca.cert})
}

// SVID issues an X.509 SVID for id (a path in the CA's trust domain, or a whole spiffe:// ID),
// valid for an hour.
func (ca *CA) SVID(t testing.TB, id string) *x509svid.SVID {
	return ca.SVIDValid(t, id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

// SVIDValid issues an X.509 SVID for id valid from notBefore to notAfter (an expired one when
// notAfter is past).
func (ca *CA) SVIDValid(t testing.TB, id string, notBefore, notAfter time.Time) *x509svid.SVID {
	t.Helper()
	sid, err := spiffeid.FromString(id)
	if err != nil {
		sid, err = spiffeid.FromPath(ca.TD, id)
	}
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{Organization: []string{"svidtest"}},
		URIs:         []*url.URL{sid.URL()},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageKeyAgreement,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &x509svid.SVID{ID: sid, Certificates: []*x509.Certificate{cert}, PrivateKey: key}
}

// Source serves an SVID and bundles, as workloadapi.X509Source does; Set rotates the SVID.
type Source struct {
	mu      sync.RWMutex
	svid    *x509svid.SVID
	bundles *x509bundle.Set
}

// NewSource serves svid, trusting the bundles of cas.
func NewSource(svid *x509svid.SVID, cas ...*CA) *Source {
	set := x509bundle.NewSet()
	for _, ca := range cas {
		set.Add(ca.Bundle())
	}
	return &Source{svid: svid, bundles: set}
}

// Set makes svid the one new handshakes present.
func (s *Source) Set(svid *x509svid.SVID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.svid = svid
}

// GetX509SVID implements x509svid.Source.
func (s *Source) GetX509SVID() (*x509svid.SVID, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.svid, nil
}

// GetX509BundleForTrustDomain implements x509bundle.Source.
func (s *Source) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	return s.bundles.GetX509BundleForTrustDomain(td)
}

func newKey(t testing.TB) crypto.Signer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
