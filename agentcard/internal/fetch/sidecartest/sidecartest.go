// Package sidecartest stands in, in agentcard's tests, for a kagenti-authbridge inbound proxy with
// mutual TLS (docs/identity.md, "Mutual TLS between sidecars") in front of an agent that serves
// its card. Pillars never import each other, so agentcard cannot start the real one; this one
// speaks to a client exactly as it does: a connection whose first byte opens a TLS handshake gets
// mutual TLS with the workload's SVID, a client SVID of the trust domain required and ALPN
// contract.MTLSALPN the only protocol selected (a client offering only others fails the
// handshake, one offering none is served), then plain HTTP/1.1 inside; any other connection is
// served as is (permissive) or answered 426 with {"error":"mtls_required"} and the same headers
// (strict). tokenexchange's TestAttestedCardFetchGetsTheCardWithoutAToken runs a client set up as
// agentcard's against the real one.
package sidecartest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Sidecar is a running stand-in.
type Sidecar struct {
	// Port is where it listens on 127.0.0.1.
	Port int32

	mu     sync.Mutex
	alpn   []string
	peers  []string
	plain  int
	failed []error
}

// Serve starts a stand-in on 127.0.0.1 presenting svid, trusting bundle for client SVIDs of
// svid's trust domain, strict or permissive, in front of agent; it stops with the test.
func Serve(t testing.TB, strict bool, svid *x509svid.SVID, bundle x509bundle.Source, agent http.Handler) *Sidecar {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := tlsconfig.MTLSServerConfig(staticSVID{svid}, bundle, tlsconfig.AuthorizeMemberOf(svid.ID.TrustDomain()))
	cfg.NextProtos = []string{contract.MTLSALPN}
	cfg.MinVersion = tls.VersionTLS12
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(p)
	s := &Sidecar{Port: int32(port)}
	conns := make(chan net.Conn)
	srv := &http.Server{Handler: agent, ReadHeaderTimeout: 5 * time.Second}
	cl := &chanListener{Listener: ln, conns: conns, done: make(chan struct{})}
	go func() { _ = srv.Serve(cl) }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.classify(c, cfg, strict, cl)
		}
	}()
	t.Cleanup(func() { _ = srv.Close(); _ = cl.Close() })
	return s
}

func (s *Sidecar) classify(c net.Conn, cfg *tls.Config, strict bool, l *chanListener) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		_ = c.Close()
		return
	}
	pc := &peeked{Conn: c, r: br}
	var out net.Conn = pc
	switch {
	case first[0] == 0x16:
		tc := tls.Server(pc, cfg)
		if err := tc.Handshake(); err != nil {
			s.record(func() { s.failed = append(s.failed, err) })
			_ = c.Close()
			return
		}
		st := tc.ConnectionState()
		peer, _ := x509svid.IDFromCert(st.PeerCertificates[0])
		s.record(func() { s.alpn, s.peers = append(s.alpn, st.NegotiatedProtocol), append(s.peers, peer.String()) })
		out = plainConn{tc} // the HTTP server reads it as plain, as the inbound's does
	case strict:
		s.record(func() { s.plain++ })
		body := `{"error":"mtls_required","error_description":"mtls.mode is strict"}` + "\n"
		_, _ = fmt.Fprintf(c, "HTTP/1.1 426 Upgrade Required\r\nUpgrade: TLS/1.3, TLS/1.2\r\nConnection: close, Upgrade\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = c.Close()
		return
	default:
		s.record(func() { s.plain++ })
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case l.conns <- out:
	case <-l.done:
		_ = c.Close()
	}
}

func (s *Sidecar) record(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// ALPN lists the protocol each completed handshake selected ("" when the client offered none).
func (s *Sidecar) ALPN() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.alpn...)
}

// Peers lists the SPIFFE ID each completed handshake's client presented.
func (s *Sidecar) Peers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.peers...)
}

// Plaintext counts the connections that did not open with a TLS handshake.
func (s *Sidecar) Plaintext() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plain
}

// Failed lists the errors of the handshakes that failed.
func (s *Sidecar) Failed() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.failed...)
}

type staticSVID struct{ svid *x509svid.SVID }

func (s staticSVID) GetX509SVID() (*x509svid.SVID, error) { return s.svid, nil }

// chanListener hands the HTTP server the connections classify let through.
type chanListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (c *peeked) Read(p []byte) (int, error) { return c.r.Read(p) }

// plainConn hides the *tls.Conn from net/http, which would otherwise treat the connection as
// HTTPS and look for a handler of the negotiated protocol.
type plainConn struct{ net.Conn }
