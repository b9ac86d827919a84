// Package tlsid gives the federation's mutual TLS its SPIFFE identities: the X.509-SVID a side
// presents (from the SPIRE Workload API or from files a per-cluster CA writes, re-read when they
// change) and the trust bundles it checks the other side against. go-spiffe's tlsconfig asks the
// source for the current SVID at every handshake, so a rotated certificate is used by the next
// connection and an open stream is not dropped.
package tlsid

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// Static is an x509svid.Source holding one SVID that Set replaces (tests, and FileSource's cache).
type Static struct{ svid atomic.Pointer[x509svid.SVID] }

// NewStatic returns a source presenting s.
func NewStatic(s *x509svid.SVID) *Static {
	st := &Static{}
	st.svid.Store(s)
	return st
}

// Set replaces the SVID presented from the next handshake on.
func (s *Static) Set(v *x509svid.SVID) { s.svid.Store(v) }

// GetX509SVID implements x509svid.Source.
func (s *Static) GetX509SVID() (*x509svid.SVID, error) {
	if v := s.svid.Load(); v != nil {
		return v, nil
	}
	return nil, errors.New("no X.509-SVID loaded")
}

// FileSource reads an SVID from a PEM certificate chain and key (what spiffe-helper or a
// per-cluster CA writes), again whenever either file changes.
type FileSource struct {
	CertFile, KeyFile string

	svid reloaded[x509svid.SVID]
}

// GetX509SVID implements x509svid.Source.
func (f *FileSource) GetX509SVID() (*x509svid.SVID, error) {
	return f.svid.get(func() (*x509svid.SVID, error) {
		s, err := x509svid.Load(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the X.509-SVID from %s and %s: %w", f.CertFile, f.KeyFile, err)
		}
		return s, nil
	}, f.CertFile, f.KeyFile)
}

// FileBundle reads the trust bundle of one trust domain from a PEM file, again when it changes.
type FileBundle struct {
	TrustDomain spiffeid.TrustDomain
	File        string

	bundle reloaded[x509bundle.Bundle]
}

// GetX509BundleForTrustDomain implements x509bundle.Source.
func (b *FileBundle) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	if td != b.TrustDomain {
		return nil, fmt.Errorf("no trust bundle for trust domain %q (only %q)", td, b.TrustDomain)
	}
	return b.bundle.get(func() (*x509bundle.Bundle, error) {
		x, err := x509bundle.Load(td, b.File)
		if err != nil {
			return nil, fmt.Errorf("loading the trust bundle of %q from %s: %w", td, b.File, err)
		}
		return x, nil
	}, b.File)
}

// reloaded holds what was last loaded from some files, loaded again when one of them changes
// (size or modification time). A load that fails while a value is held keeps that value: the
// files are half-written by a rotation.
type reloaded[T any] struct {
	mu      sync.Mutex
	stamp   string
	current *T
}

// get returns the value held, or what load returns when one of paths changed since.
func (r *reloaded[T]) get(load func() (*T, error), paths ...string) (*T, error) {
	stamp, err := fileStamp(paths...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current != nil && stamp == r.stamp {
		return r.current, nil
	}
	v, err := load()
	if err != nil {
		if r.current != nil {
			return r.current, nil
		}
		return nil, err
	}
	r.current, r.stamp = v, stamp
	return v, nil
}

func fileStamp(paths ...string) (string, error) {
	s := ""
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// Sources are where one side's identity and its peer's trust bundle come from.
type Sources struct {
	SVID    x509svid.Source
	Bundles x509bundle.Source
	close   func() error
}

// Close releases a Workload API connection.
func (s Sources) Close() error {
	if s.close != nil {
		return s.close()
	}
	return nil
}

// FromWorkloadAPI uses the SPIRE agent's Workload API at socket (unix:///...): the SVID and the
// bundles (its own trust domain's and the federated ones SPIRE knows), both rotated by SPIRE.
func FromWorkloadAPI(ctx context.Context, socket string) (Sources, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(socket)))
	if err != nil {
		return Sources{}, fmt.Errorf("SPIFFE Workload API at %s: %w", socket, err)
	}
	return Sources{SVID: src, Bundles: src, close: src.Close}, nil
}

// FromFiles uses certificate files (a per-cluster CA where SPIRE is absent): the SVID from
// certFile/keyFile and the peer trust domain's bundle from bundleFile.
func FromFiles(certFile, keyFile string, peer spiffeid.TrustDomain, bundleFile string) Sources {
	return Sources{SVID: &FileSource{CertFile: certFile, KeyFile: keyFile}, Bundles: &FileBundle{TrustDomain: peer, File: bundleFile}}
}

// Rejected is told why a peer's certificate was refused: its leaf (nil when unparsable) and the error.
type Rejected func(leaf *x509.Certificate, err error)

// ServerConfig is the hub's TLS: it presents svid, requires a client SVID chaining to a bundle of
// bundles (one per registered member trust domain), and tells onReject about every refusal.
func ServerConfig(svid x509svid.Source, bundles x509bundle.Source, onReject Rejected) *tls.Config {
	cfg := tlsconfig.MTLSServerConfig(svid, bundles, tlsconfig.AuthorizeAny())
	verify := cfg.VerifyPeerCertificate
	cfg.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
		err := verify(raw, chains)
		if err != nil && onReject != nil {
			var leaf *x509.Certificate
			if len(raw) > 0 {
				leaf, _ = x509.ParseCertificate(raw[0])
			}
			onReject(leaf, err)
		}
		return err
	}
	cfg.MinVersion = tls.VersionTLS13
	return cfg
}

// ClientConfig is the member's TLS: it presents svid and accepts only a hub whose SVID is hubID.
func ClientConfig(svid x509svid.Source, bundles x509bundle.Source, hubID spiffeid.ID) *tls.Config {
	cfg := tlsconfig.MTLSClientConfig(svid, bundles, tlsconfig.AuthorizeID(hubID))
	cfg.MinVersion = tls.VersionTLS13
	return cfg
}

// PeerID is the SPIFFE ID of a verified peer certificate.
func PeerID(leaf *x509.Certificate) (spiffeid.ID, error) { return x509svid.IDFromCert(leaf) }
