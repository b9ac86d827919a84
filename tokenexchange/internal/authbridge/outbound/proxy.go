// Package outbound is the outbound role (the seed's envoy-proxy): a transparent proxy for the
// workload's outgoing TCP connections, which proxy-init redirects to it, and an explicit HTTP
// proxy for clients that connect to it themselves (HTTP_PROXY; explicit.go). HTTP/1.1 and h2c
// requests to a destination that calls for it leave with the caller's token exchanged (RFC 8693)
// for one with the destination's audience; everything else passes untouched.
package outbound

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/inbound"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
)

// Proxy is the outbound proxy.
type Proxy struct {
	cfg       *sidecar.Config
	creds     *CredentialSource
	exchanger *Exchanger
	log       *zap.Logger
	rp        *httputil.ReverseProxy
	dialer    *net.Dialer

	// Destination finds where a redirected connection was going (OriginalDestination; tests
	// that run without a network namespace give another).
	Destination func(net.Conn) (netip.AddrPort, error)
	// Resolver looks up the Host names of requests, to check that they name the destination
	// (routeName); net.DefaultResolver unless a test gives another.
	Resolver Resolver
	names    *nameCache
	// DetectionTimeout is how long the proxy waits for a client's first bytes before it takes the
	// connection for a server-first protocol and tunnels it.
	DetectionTimeout time.Duration
	// Loops, when set, tracks the accept loops of Serve for the role's liveness.
	Loops *sidecar.Loops
	// egress is the egress policy in effect (egress.go).
	egress egressState
	// originatesMTLS: OriginateMTLS was called, so exchanged tokens carry their expected peer.
	originatesMTLS bool
	// Tracing, when set, exports a span of every HTTP request forwarded, and of every exchange
	// (the Exchanger's own Tracing).
	Tracing *tracing.Tracing
}

type ctxKey struct{}

// New builds the proxy.
func New(cfg *sidecar.Config, creds *CredentialSource, exchanger *Exchanger, log *zap.Logger) *Proxy {
	p := &Proxy{
		cfg: cfg, creds: creds, exchanger: exchanger, log: log,
		dialer:           &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		Destination:      OriginalDestination,
		Resolver:         net.DefaultResolver,
		names:            newNameCache(),
		DetectionTimeout: 5 * time.Second,
	}
	p.egress.watch(cfg, ResolvConfNameServers("/etc/resolv.conf"))
	h1 := &http.Transport{
		Proxy:               nil, // the original destination, never an HTTP proxy from the environment
		DialContext:         p.dialer.DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	h2 := inbound.H2CTransport(h1)
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = r.In.Context().Value(ctxKey{}).(netip.AddrPort).String()
			// A transparent proxy adds nothing and keeps what the client sent.
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := r.In.Header[h]; ok {
					r.Out.Header[h] = v
				}
			}
		},
		Transport:     protocolTransport{h1: h1, h2: h2},
		FlushInterval: -1,
		BufferPool:    copyBuffers,
		ErrorLog:      zap.NewStdLog(log),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			dst := r.Context().Value(ctxKey{}).(netip.AddrPort)
			writeError(w, http.StatusBadGateway, "upstream_unavailable", fmt.Sprintf("kagenti outbound proxy: %s (%s) did not answer: %v", r.Host, dst, err))
		},
	}
	return p
}

// Serve accepts the redirected connections of ln until ctx ends.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	httpLn := newChanListener(ln.Addr())
	var httpListener net.Listener = httpLn
	if p.Loops != nil {
		ln = p.Loops.Listener("outbound proxy on "+ln.Addr().String(), ln)
		httpListener = p.Loops.Listener("outbound HTTP server behind "+ln.Addr().String(), httpLn)
	}
	srv := &http.Server{
		Handler:           p,
		Protocols:         inbound.ServerProtocols(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          zap.NewStdLog(p.log),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if rc := c.(*redirectedConn); rc.explicit {
				return context.WithValue(ctx, explicitKey{}, rc.self) // each request names its destination
			}
			return context.WithValue(ctx, ctxKey{}, c.(*redirectedConn).dst)
		},
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(httpListener) }()
	go func() {
		<-ctx.Done()
		ln.Close()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	self, _ := netip.ParseAddrPort(ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				<-served
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go p.handle(ctx, c, self, httpLn)
	}
}

func (p *Proxy) handle(ctx context.Context, c net.Conn, self netip.AddrPort, httpLn *chanListener) {
	dst, err := p.Destination(c)
	if err != nil || isSelf(dst, self) {
		// Not redirected: a client connected to the proxy itself, using it as its HTTP proxy
		// (HTTP_PROXY, the injector's proxy mode). Its requests name their destinations; a
		// request that names the proxy itself is refused there (no loop).
		if !httpLn.push(ctx, &redirectedConn{Conn: c, explicit: true, self: self}) {
			c.Close()
		}
		return
	}
	proto, prefix, silent, err := sniff(c, nil, p.DetectionTimeout)
	if err != nil && len(prefix) == 0 {
		c.Close()
		return
	}
	if pol := p.egress.current(); silent && !pol.decide("", dst).allowed {
		if !pol.dryRun {
			// Only a name could allow this destination: wait for the client's word rather
			// than connect to it to see whether the server speaks first. (A dry run changes
			// no traffic: it only records.)
			proto, prefix, silent, err = sniff(c, prefix, p.DetectionTimeout)
		}
		if err != nil && len(prefix) == 0 || silent && !p.silentClientAllowed(c, dst) {
			c.Close()
			return
		}
	}
	switch {
	case silent:
		var isHTTP bool
		if isHTTP, prefix = p.lateClient(ctx, c, dst, prefix); !isHTTP {
			return
		}
	case proto == protoOther:
		p.tunnelChecked(c, prefix, dst)
		return
	}
	rc := &redirectedConn{Conn: c, dst: dst, prefix: bytes.NewReader(prefix)}
	if !httpLn.push(ctx, rc) {
		c.Close()
	}
}

// lateClient handles a client that said nothing (or not enough) within DetectionTimeout: a
// server-first protocol, or a client that is late (a loaded machine, a connection opened ahead of
// use). It connects to the destination and sees who speaks first; only the server speaking makes
// the connection a tunnel, so a late HTTP request is still proxied as HTTP, its token exchanged,
// never passed through untouched. It reports whether the connection is HTTP after all (with the
// bytes read so far), else it relayed the connection to its end.
func (p *Proxy) lateClient(ctx context.Context, c net.Conn, dst netip.AddrPort, prefix []byte) (bool, []byte) {
	upstream, err := p.dialer.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		p.log.Info("tunnel failed", zap.Stringer("to", dst), zap.Error(err))
		c.Close()
		return false, nil
	}
	fw := awaitFirstWord(c, upstream)
	if fw.err != nil && len(fw.fromServer) == 0 && len(fw.fromClient) == 0 {
		c.Close()
		upstream.Close()
		return false, nil
	}
	toUpstream := append(prefix, fw.fromClient...)
	if len(fw.fromServer) == 0 && fw.err == nil {
		// The client spoke first: its bytes decide.
		proto, b, _, err := sniff(c, toUpstream, p.DetectionTimeout)
		toUpstream = b
		if err == nil && proto != protoOther {
			upstream.Close()
			return true, toUpstream
		}
	}
	if err := relay(c, upstream, toUpstream, fw.fromServer); err != nil {
		p.log.Info("tunnel failed", zap.Stringer("to", dst), zap.Error(err))
	}
	return false, nil
}

// ServeHTTP forwards one request, with an exchanged token when its destination calls for one.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dst, redirected := r.Context().Value(ctxKey{}).(netip.AddrPort)
	if !redirected {
		var ok bool
		if r, dst, ok = p.explicitRequest(w, r); !ok {
			return
		}
	}
	if tracer := p.Tracing.Outbound(); tracer != nil {
		var span trace.Span
		w, r, span = startSpan(tracer, w, r, dst)
		defer tracing.EndRequest(span, w, trace.SpanKindClient)
	}
	if !p.egressAllowsRequest(w, r, dst, "http") {
		return
	}
	c := p.cfg.Current().Config
	host := r.Host
	if host == "" {
		host = dst.Addr().String()
	}
	d := Decide(c, p.routeName(r.Host, dst), strconv.Itoa(int(dst.Port())))
	if d.Exchange {
		if len(r.Header.Values("Authorization")) > 1 {
			// The proxy would exchange one value and the destination might read another, the
			// caller's own token.
			writeError(w, http.StatusBadRequest, "invalid_request", "kagenti outbound proxy: more than one Authorization header")
			return
		}
		if subject, ok := inbound.Bearer(r); ok {
			if !d.Target.AllowScopeEscalation {
				if sc, ok := undelegatedScope(subject, d.Target.Scopes); ok {
					writeError(w, http.StatusForbidden, "scope_not_delegated", fmt.Sprintf(
						"kagenti outbound proxy: the route for %s asks for scope %q, which the caller's token does not carry: scopes only narrow along a delegation chain (allowScopeEscalation on the route's target lets the identity provider decide)",
						host, sc))
					return
				}
			}
			creds, err := p.creds.Get(c)
			if err != nil {
				writeError(w, http.StatusServiceUnavailable, "credentials_unavailable", "kagenti outbound proxy: "+err.Error())
				return
			}
			tok, err := p.exchanger.Exchange(r.Context(), Request{
				TokenURL: c.Outbound.TokenExchange.TokenURL, SubjectToken: subject,
				Audience: d.Target.Audience, Scopes: d.Target.Scopes, Credentials: creds,
			})
			if err != nil {
				var xe *ExchangeError
				if !errors.As(err, &xe) {
					xe = &ExchangeError{Status: http.StatusBadGateway, Description: err.Error()}
				}
				p.log.Warn("token exchange failed", zap.String("host", host), zap.String("audience", d.Target.Audience), zap.Error(err))
				writeError(w, xe.Status, "token_exchange_failed", fmt.Sprintf("kagenti outbound proxy: exchanging the token for audience %q (destination %s) failed: %s",
					d.Target.Audience, host, xe.Description))
				return
			}
			r.Header.Set("Authorization", "Bearer "+tok)
			if p.originatesMTLS {
				r = withExpectedPeer(r, d.Target.Audience)
			}
		}
	}
	p.rp.ServeHTTP(w, r)
}

// Ready lists what the proxy waits for: the workload's credentials, when it exchanges.
func (p *Proxy) Ready() []string {
	c := p.cfg.Current().Config
	if !c.Exchanges() {
		return nil
	}
	if _, err := p.creds.Get(c); err != nil {
		return []string{err.Error()}
	}
	return nil
}

// undelegatedScope returns a scope of want that the subject token does not carry. The token's
// payload is read unverified: the identity provider verifies it on the exchange, and refuses it
// if it was altered, so a forged scope claim gains nothing. A token that is not a JWT (opaque)
// cannot be read here: the identity provider alone decides.
func undelegatedScope(subject string, want []string) (string, bool) {
	if len(want) == 0 {
		return "", false
	}
	held, ok := jwtScopes(subject)
	if !ok {
		return "", false
	}
	for _, sc := range want {
		if !slices.Contains(held, sc) {
			return sc, true
		}
	}
	return "", false
}

// jwtScopes reads the scope claim of a JWT's payload (RFC 8693 §4.2: space-separated; some
// issuers write a list, or scp); false when token is not a JWT.
func jwtScopes(token string) ([]string, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, false
	}
	var c struct {
		Scope any `json:"scope"`
		Scp   any `json:"scp"`
	}
	if json.Unmarshal(b, &c) != nil {
		return nil, false
	}
	var out []string
	for _, v := range []any{c.Scope, c.Scp} {
		switch v := v.(type) {
		case string:
			out = append(out, strings.Fields(v)...)
		case []any:
			for _, e := range v {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out, true
}

func writeError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}

// copyBuffers are the ReverseProxy's response copy buffers: without a pool it allocates (and the
// runtime clears) 32 KiB per response, 5 % of the proxy's CPU at 1,000 req/s (CPU profile of
// BenchmarkProxyCachedToken).
var copyBuffers httputil.BufferPool = &bufferPool{p: sync.Pool{New: func() any { return new([32 << 10]byte) }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[32 << 10]byte)[:] }
func (b *bufferPool) Put(s []byte) {
	if cap(s) == 32<<10 {
		b.p.Put((*[32 << 10]byte)(s[:32<<10]))
	}
}

// protocolTransport forwards an HTTP/2 request over h2c and any other over HTTP/1.1: the
// destination speaks what the client spoke to it.
type protocolTransport struct{ h1, h2 http.RoundTripper }

func (t protocolTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return t.h2.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}
