package outbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"go.uber.org/zap"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/inbound"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// PlaintextTTL is how long a permissive caller remembers that a destination did not answer mTLS
// (it sends plain HTTP there meanwhile) before it tries mTLS again.
const PlaintextTTL = 5 * time.Minute

// ErrMTLSUnavailable is the error code of a request a strict caller did not send: its destination
// did not complete mTLS with an SVID of the trust domain.
const ErrMTLSUnavailable = "mtls_unavailable"

// ErrPeerMismatch is the error code of a request not sent because the destination's SVID is not
// the audience its exchanged token is for.
const ErrPeerMismatch = "mtls_peer_mismatch"

// peerKey carries, in a request's context, the SPIFFE ID its exchanged token is for: over mTLS,
// only a destination presenting that SVID gets it.
type peerKey struct{}

// withExpectedPeer marks r's exchanged token as being for audience: when audience is a SPIFFE ID,
// an mTLS destination must present that SVID.
func withExpectedPeer(r *http.Request, audience string) *http.Request {
	id, err := spiffeid.FromString(audience)
	if err != nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), peerKey{}, id))
}

// peerMismatchError: the destination completed the handshake with an SVID of the trust domain,
// but not the one the token is for (a kagenti sidecar of another workload at that address).
type peerMismatchError struct {
	want, got spiffeid.ID
}

func (e *peerMismatchError) Error() string {
	return fmt.Sprintf("the destination presented %s, and the exchanged token is for %s", e.got, e.want)
}

// mtlsError is a failed mTLS origination: the connection was made, the handshake failed (no TLS,
// no kagenti sidecar, an SVID the trust domain does not vouch for). No request byte was sent.
type mtlsError struct {
	dst netip.AddrPort
	err error
}

func (e *mtlsError) Error() string {
	return fmt.Sprintf("mTLS to %s failed: %v", e.dst, e.err)
}

func (e *mtlsError) Unwrap() error { return e.err }

// OriginateMTLS makes the proxy originate mutual TLS (mtls.mode permissive or strict) to the
// destinations in private address space (pod and Service networks: where kagenti sidecars are),
// presenting the workload's SVID from src and requiring the destination's to be of td, with ALPN
// kagenti-mtls/1, which only a kagenti inbound proxy accepts. HTTP/1.1 and h2c travel inside
// unchanged. Strict: a destination that does not complete mTLS gets no request; the caller is
// answered 503 mtls_unavailable. Permissive: the request goes in plain HTTP, and the destination
// is remembered as plaintext for PlaintextTTL. Public destinations are left as they were (no
// kagenti sidecar serves there).
func (p *Proxy) OriginateMTLS(mode string, src inbound.SVIDSource, td spiffeid.TrustDomain) {
	plain := p.rp.Transport.(protocolTransport)
	m := &mtlsTransport{strict: mode == authconfig.MTLSStrict, plain: plain, dialer: p.dialer,
		plaintext: map[netip.AddrPort]time.Time{}, log: p.log, now: time.Now,
		clientConfig: func(peer spiffeid.ID) *tls.Config {
			authorize := tlsconfig.AuthorizeMemberOf(td)
			if !peer.IsZero() {
				authorize = func(got spiffeid.ID, _ [][]*x509.Certificate) error {
					if got != peer {
						return &peerMismatchError{want: peer, got: got}
					}
					return nil
				}
			}
			cfg := tlsconfig.MTLSClientConfig(src, src, authorize)
			cfg.NextProtos = []string{contract.MTLSALPN}
			cfg.MinVersion = tls.VersionTLS12
			return cfg
		},
		byPeer: map[spiffeid.ID]protocolTransport{}}
	m.secure = m.secureFor(spiffeid.ID{})
	p.rp.Transport = m
	p.originatesMTLS = true
	fallback := p.rp.ErrorHandler
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		var me *mtlsError
		var pm *peerMismatchError
		if errors.As(err, &pm) && errors.As(err, &me) {
			p.log.Warn("request not sent", zap.String("error", ErrPeerMismatch), zap.String("host", r.Host), zap.Stringer("to", me.dst), zap.Error(pm))
			writeError(w, http.StatusServiceUnavailable, ErrPeerMismatch, fmt.Sprintf(
				"kagenti outbound proxy: %s (%s): %v; the token was not sent", r.Host, me.dst, pm))
			return
		}
		if errors.As(err, &me) {
			p.log.Info("request not sent", zap.String("error", ErrMTLSUnavailable), zap.String("host", r.Host), zap.Stringer("to", me.dst), zap.Error(me.err))
			writeError(w, http.StatusServiceUnavailable, ErrMTLSUnavailable, fmt.Sprintf(
				"kagenti outbound proxy: mtls.mode is strict and %s (%s) did not complete mutual TLS with an SVID of the trust domain %s: %v",
				r.Host, me.dst, td.Name(), me.err))
			return
		}
		fallback(w, r, err)
	}
}

// mtlsTransport sends each request over mTLS or in plain HTTP, as OriginateMTLS says.
type mtlsTransport struct {
	strict        bool
	plain, secure protocolTransport
	dialer        *net.Dialer
	log           *zap.Logger
	now           func() time.Time
	// clientConfig is the TLS of a connection whose server must present peer (zero: any SVID of
	// the trust domain).
	clientConfig func(peer spiffeid.ID) *tls.Config

	mu        sync.Mutex
	plaintext map[netip.AddrPort]time.Time // permissive: destinations that did not answer mTLS, until when
	// byPeer holds a transport per expected peer (the SPIFFE audiences of the routes): connections
	// verified for one callee are never reused for a token meant for another.
	byPeer map[spiffeid.ID]protocolTransport
}

// secureFor returns the mTLS transport whose connections are verified for peer.
func (t *mtlsTransport) secureFor(peer spiffeid.ID) protocolTransport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pt, ok := t.byPeer[peer]; ok {
		return pt
	}
	cfg := t.clientConfig(peer)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return t.dial(ctx, cfg, network, addr)
	}
	h1 := t.plain.h1.(*http.Transport).Clone()
	h1.DialContext = dial
	h2 := t.plain.h2.(*http.Transport).Clone()
	h2.DialContext = dial
	pt := protocolTransport{h1: h1, h2: h2}
	t.byPeer[peer] = pt
	return pt
}

func (t *mtlsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	dst, _ := r.Context().Value(ctxKey{}).(netip.AddrPort)
	if !dst.IsValid() || !sidecarAddress(dst.Addr()) || t.knownPlaintext(dst) {
		return t.plain.RoundTrip(r)
	}
	secure := t.secure
	if peer, ok := r.Context().Value(peerKey{}).(spiffeid.ID); ok {
		secure = t.secureFor(peer)
	}
	try := r
	if !t.strict && r.Body != nil && r.Body != http.NoBody {
		// The transport closes the body of a request it fails; the plain retry needs it open
		// (and unread: the handshake fails before the request is written).
		try = r.Clone(r.Context())
		try.Body = io.NopCloser(r.Body)
	}
	resp, err := secure.RoundTrip(try)
	var me *mtlsError
	var pm *peerMismatchError
	if err == nil || t.strict || !errors.As(err, &me) || errors.As(err, &pm) {
		// A sidecar of another workload answered: not a destination to fall back to plain HTTP.
		return resp, err
	}
	// Permissive: the handshake failed before any byte of the request was sent.
	t.mu.Lock()
	t.plaintext[dst] = t.now().Add(PlaintextTTL)
	t.mu.Unlock()
	t.log.Info("destination does not answer mTLS: plain HTTP (mtls.mode permissive)", zap.Stringer("to", dst), zap.Duration("for", PlaintextTTL), zap.Error(me.err))
	return t.plain.RoundTrip(r)
}

func (t *mtlsTransport) knownPlaintext(dst netip.AddrPort) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.plaintext[dst]
	if ok && t.now().After(until) {
		delete(t.plaintext, dst)
		return false
	}
	return ok
}

// dial connects to the destination and completes the mTLS handshake: the destination's SVID of
// the trust domain and ALPN kagenti-mtls/1 (a kagenti inbound proxy). The HTTP transport sees a
// plain connection and speaks HTTP/1.1 or h2c inside.
func (t *mtlsTransport) dial(ctx context.Context, cfg *tls.Config, network, addr string) (net.Conn, error) {
	c, err := t.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	dst, _ := netip.ParseAddrPort(addr)
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, &mtlsError{dst: dst, err: err}
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != contract.MTLSALPN {
		_ = c.Close()
		return nil, &mtlsError{dst: dst, err: fmt.Errorf("the destination's TLS server is not a kagenti sidecar (ALPN %q, not %s)", p, contract.MTLSALPN)}
	}
	return struct{ net.Conn }{tc}, nil
}

// sidecarAddress: a pod or Service address, where kagenti sidecars serve (private, unique local
// or carrier-grade NAT space; loopback for tests and explicit-proxy peers on the node).
func sidecarAddress(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLoopback() || netip.MustParsePrefix("100.64.0.0/10").Contains(a)
}
