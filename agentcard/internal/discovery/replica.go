package discovery

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"
)

// ReplicaVerifier tells a request that another replica of this discovery API forwarded from any
// other: on its TLS connection the peer presented a certificate for ServerName issued by the CA in
// CAFile — the API's own serving certificate. The TLS handshake proved the peer holds its private
// key, which only the replicas hold (the Secret they mount). A client can set any header, but not
// that.
type ReplicaVerifier struct {
	CAFile, ServerName string

	mu      sync.Mutex
	pool    *x509.CertPool
	caMod   time.Time
	trusted []byte // the last leaf verified, under the CA read at caMod
}

// IsReplica says whether the connection's peer is a replica of the API.
func (v *ReplicaVerifier) IsReplica(cs *tls.ConnectionState) bool {
	if v == nil || cs == nil || len(cs.PeerCertificates) == 0 {
		return false
	}
	fi, err := os.Stat(v.CAFile)
	if err != nil {
		return false
	}
	leaf := cs.PeerCertificates[0]
	v.mu.Lock()
	defer v.mu.Unlock()
	if !fi.ModTime().Equal(v.caMod) || v.pool == nil { // a new CA: what it verified no longer holds
		ca, err := os.ReadFile(v.CAFile)
		if err != nil {
			return false
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return false
		}
		v.pool, v.caMod, v.trusted = pool, fi.ModTime(), nil
	}
	if v.trusted != nil && bytes.Equal(v.trusted, leaf.Raw) && time.Now().Before(leaf.NotAfter) {
		return true
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	// Any key usage: a serving certificate (server auth only, as the rotator and most issuers make
	// it) is what a replica holds, and here it identifies the replica rather than a server.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: v.pool, Intermediates: inter, DNSName: v.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return false
	}
	v.trusted = leaf.Raw
	return true
}

// rateLimitKey is who a request counts against in the per-client rate limit: the client a replica
// forwarded it for (ForwardedForHeader, believed only from a replica), else the connection's
// source address.
func (s *Server) rateLimitKey(r *http.Request) string {
	if v := r.Header.Get(ForwardedForHeader); v != "" && s.Replicas.IsReplica(r.TLS) {
		if addr, err := netip.ParseAddr(v); err == nil {
			return addr.String()
		}
	}
	return clientAddress(r)
}

// ServingTLSConfig is the discovery API's server TLS configuration: the certificate from get, and
// a client certificate asked for but not required (ordinary clients send none; a replica
// forwarding to the leader sends the API's own, ReplicaVerifier).
func ServingTLSConfig(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: get, ClientAuth: tls.RequestClientCert}
}
