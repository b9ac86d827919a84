package inbound

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"go.uber.org/zap"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// ErrMTLSRequired is the error code of a plaintext request to a strict inbound proxy.
const ErrMTLSRequired = "mtls_required"

// SVIDSource is where the workload's X.509 SVID and the trust domain's bundle come from: the
// SPIRE agent's Workload API (workloadapi.X509Source), which rotates both. Each handshake reads
// the current SVID, so a rotation applies to new connections and open ones keep theirs.
type SVIDSource interface {
	x509svid.Source
	x509bundle.Source
}

// sniffTimeout bounds the wait for a new connection's first byte.
const sniffTimeout = 30 * time.Second

// MTLSListener wraps the inbound listener for mtls.mode permissive or strict. A connection whose
// first byte opens a TLS handshake (0x16) is served over TLS: the proxy presents the workload's
// SVID and requires the client's, verified against the trust domain's bundle (a peer of another
// trust domain, an expired or otherwise invalid SVID, no certificate: the handshake fails, logged
// with the reason). Any other connection is served as is in permissive mode; in strict mode it is
// answered 426 with {"error":"mtls_required"} and closed. Classifying happens off the accept
// loop, so a client that sends nothing holds only its own connection.
func MTLSListener(ln net.Listener, mode string, src SVIDSource, td spiffeid.TrustDomain, log *zap.Logger) net.Listener {
	l := &mtlsListener{Listener: ln, strict: mode == authconfig.MTLSStrict, log: log,
		conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{})}
	l.tls = ServerTLSConfig(src, td, log)
	go l.accept()
	return l
}

// ServerTLSConfig is the inbound proxy's TLS configuration: the SVID from src, a client SVID of
// td required and verified against src's bundle, ALPN kagenti-mtls/1. A refused peer is logged
// with the reason.
func ServerTLSConfig(src SVIDSource, td spiffeid.TrustDomain, log *zap.Logger) *tls.Config {
	cfg := tlsconfig.MTLSServerConfig(src, src, tlsconfig.AuthorizeMemberOf(td))
	verify := cfg.VerifyPeerCertificate
	cfg.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
		err := verify(raw, chains)
		if err != nil {
			telemetry.Default.Request("mtls_refused")
			log.Info("mTLS peer refused", zap.String("error", "mtls_peer_refused"), zap.String("peer", certID(raw)), zap.String("reason", err.Error()))
		}
		return err
	}
	cfg.NextProtos = []string{contract.MTLSALPN}
	cfg.MinVersion = tls.VersionTLS12
	return cfg
}

// certID names the SPIFFE ID of a refused peer's leaf certificate for the audit record, when it
// has one.
func certID(raw [][]byte) string {
	if len(raw) == 0 {
		return ""
	}
	c, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return ""
	}
	id, err := x509svid.IDFromCert(c)
	if err != nil {
		return ""
	}
	return id.String()
}

type mtlsListener struct {
	net.Listener
	tls    *tls.Config
	strict bool
	log    *zap.Logger

	conns chan net.Conn
	errs  chan error
	done  chan struct{}
	once  sync.Once
}

func (l *mtlsListener) accept() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.classify(c)
	}
}

func (l *mtlsListener) classify(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		return
	}
	pc := &peekedConn{Conn: c, r: br}
	var out net.Conn = pc
	switch {
	case first[0] == 0x16: // TLS handshake record
		tc := tls.Server(pc, l.tls)
		ctx, cancel := context.WithTimeout(context.Background(), sniffTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			l.log.Debug("TLS handshake failed", zap.String("remote", c.RemoteAddr().String()), zap.Error(err))
			_ = c.Close()
			return
		}
		// The HTTP server sees a plain connection (HTTP/1.1 or h2c inside the tunnel) and the
		// handshake's state through ConnContext.
		out = &mtlsConn{Conn: tc, state: tc.ConnectionState()}
	case l.strict:
		l.refusePlaintext(pc, first[0])
		return
	}
	select {
	case l.conns <- out:
	case <-l.done:
		_ = c.Close()
	}
}

// refusePlaintext answers a plaintext connection to a strict proxy: 426 with the reason when it
// speaks HTTP (its first byte starts a method), and closes it.
func (l *mtlsListener) refusePlaintext(c net.Conn, first byte) {
	defer c.Close()
	reason := "mtls.mode is strict: this port accepts only mutual TLS from a kagenti sidecar presenting an X.509 SVID of the trust domain"
	telemetry.Default.Request("mtls_required")
	l.log.Info("connection refused", zap.String("error", ErrMTLSRequired), zap.String("remote", c.RemoteAddr().String()), zap.String("reason", reason))
	if first < 'A' || first > 'Z' {
		return
	}
	body := fmt.Sprintf(`{"error":%q,"error_description":%q}`+"\n", ErrMTLSRequired, reason)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 426 Upgrade Required\r\nUpgrade: TLS/1.3, TLS/1.2\r\nConnection: close, Upgrade\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	// Read what the client still sends (its request), bounded, so that closing with unread
	// bytes does not reset the connection before the client read the answer.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

func (l *mtlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *mtlsListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// peekedConn replays the bytes read to classify the connection.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the underlying TCP connection, so that a refusal's answer is read before
// the close.
func (c *peekedConn) CloseWrite() error {
	if tc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return tc.CloseWrite()
	}
	return nil
}

// mtlsConn is a connection whose mTLS handshake is done: the HTTP server reads it as plain
// (kagenti-mtls/1 carries HTTP/1.1 or h2c) and ConnContext hands its state to the requests.
type mtlsConn struct {
	net.Conn
	state tls.ConnectionState
}

type tlsStateKey struct{}

// ConnContext is the http.Server's ConnContext for an MTLSListener: a request on an mTLS
// connection carries the handshake's state, which PeerID reads.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if mc, ok := c.(*mtlsConn); ok {
		return context.WithValue(ctx, tlsStateKey{}, &mc.state)
	}
	return ctx
}

// PeerID is the SPIFFE ID of the X.509 SVID the client presented on an mTLS connection (verified
// at the handshake), empty for a plaintext request.
func PeerID(r *http.Request) string {
	state := r.TLS
	if s, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
		state = s
	}
	if state == nil || len(state.PeerCertificates) == 0 {
		return ""
	}
	id, err := x509svid.IDFromCert(state.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id.String()
}

// ErrPeerMismatch is the error code of an mTLS request whose token names another workload as its
// caller than the peer that presented it.
const ErrPeerMismatch = "peer_mismatch"

// peerBound binds the token to the connection: on mTLS, when the token's caller is a SPIFFE ID
// (the workload's client is its SPIFFE ID when it authenticates with its JWT SVID), the peer's
// SVID must name the same workload, so a token taken from one workload cannot be replayed by
// another over its own mTLS connection. A caller that is a registered client's name (secret-based
// registration) has no SPIFFE ID to compare: a rule on peer says which peers may present it.
// It reports whether the request may go on, having answered 403 otherwise.
func peerBound(w http.ResponseWriter, r *http.Request, claims *Claims, log *zap.Logger) bool {
	peer := PeerID(r)
	if peer == "" || claims.Request == nil || !strings.HasPrefix(claims.Request.Caller, "spiffe://") || claims.Request.Caller == peer {
		return true
	}
	reason := fmt.Sprintf("the token's caller %s is not the mTLS peer %s", claims.Request.Caller, peer)
	telemetry.Default.Request("denied")
	log.Info("request refused", zap.String("error", ErrPeerMismatch), zap.String("caller", claims.Request.Caller), zap.String("peer", peer), zap.String("path", r.URL.Path), zap.String("reason", reason))
	writeError(w, http.StatusForbidden, ErrPeerMismatch, reason)
	return false
}
