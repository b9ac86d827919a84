package inbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// ClaimsHeader carries a validated token's claims to the agent: the token's payload segment
// (base64url-encoded JSON, as Envoy's jwt_authn forwards it). A value sent by the client is
// always removed, in every spelling (removeSpellings).
const ClaimsHeader = "X-Kagenti-Claims"

// Proxy is the inbound reverse proxy: inbound port → 127.0.0.1:targetPort.
type Proxy struct {
	log        *zap.Logger
	httpClient *http.Client
	proxy      *httputil.ReverseProxy

	// Tracing, when set, exports a span of every request that needs a token (trace.go).
	Tracing *tracing.Tracing

	state  atomic.Pointer[state]
	mu     sync.Mutex
	keySet map[string]*KeySet // by JWKS URL, so that a reload keeps the cached keys
}

// state is what one configuration makes of the proxy.
type state struct {
	validate   bool
	validator  *Validator
	authz      *authorization
	targetAddr string
}

// New builds the proxy for the configuration in effect and follows its changes.
func New(cfg *sidecar.Config, httpClient *http.Client, log *zap.Logger) *Proxy {
	p := &Proxy{log: log, httpClient: httpClient, keySet: map[string]*KeySet{}}
	h1, h2 := upstreamTransports()
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = p.state.Load().targetAddr
			r.SetXForwarded()
		},
		Transport:     protocolTransport{h1: h1, h2: h2},
		FlushInterval: -1, // stream (SSE, A2A streaming) without buffering
		ErrorLog:      zap.NewStdLog(log),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			addr := p.state.Load().targetAddr
			log.Warn("agent unreachable", zap.String("agent", addr), zap.Error(err))
			writeError(w, http.StatusBadGateway, "agent_unavailable", fmt.Sprintf("kagenti auth-proxy: the agent at %s did not answer: %v", addr, err))
		},
	}
	p.apply(cfg.Current().Config)
	cfg.OnChange(func(s sidecar.Snapshot) { p.apply(s.Config) })
	return p
}

func (p *Proxy) apply(c authconfig.Config) {
	v := c.Inbound.Validation
	st := &state{
		validate:   c.Inbound.Enabled && v.Enabled,
		targetAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(int(c.Inbound.TargetPort))),
	}
	if st.validate {
		st.validator = &Validator{
			Keys: p.keys(v.JWKSURL, time.Duration(v.JWKSRefreshSeconds)*time.Second),
			Policy: Policy{Issuer: v.Issuer, Audience: v.Audience, RequiredScopes: v.RequiredScopes,
				MaxChainDepth: int(c.Inbound.Authorization.MaxChainDepth)},
		}
		st.authz = newAuthorization(c.Inbound.Authorization, p.log) // compiled once per configuration
	}
	if old := p.state.Swap(st); old != nil {
		old.authz.release(p.log) // the previous configuration's external authorizer connection
	}
}

// keys returns the key set of url, refreshed every refresh (inbound.validation.jwksRefreshSeconds).
func (p *Proxy) keys(url string, refresh time.Duration) *KeySet {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keySet[url]; ok {
		k.SetRefreshInterval(refresh)
		return k
	}
	k := NewKeySet(url, p.httpClient)
	k.SetRefreshInterval(refresh)
	p.keySet = map[string]*KeySet{url: k} // keys of a URL no longer configured are dropped
	return k
}

// Run loads the signing keys, so that the proxy is ready before the first request, and keeps them
// fresh: every tick it starts a background fetch when one is due (KeySet.RefreshIfDue; a failure
// backs off). Requests never wait for these fetches while they hold the key they need.
func (p *Proxy) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var reported error
	for {
		if st := p.state.Load(); st.validate {
			k := st.validator.Keys
			k.RefreshIfDue()
			if err := k.Err(); err != nil && (reported == nil || err.Error() != reported.Error()) {
				if k.Loaded() {
					p.log.Warn("signing keys not refreshed; keeping the previous ones", zap.String("jwks", k.URL), zap.Error(err))
				} else {
					p.log.Warn("signing keys not loaded yet", zap.String("jwks", k.URL), zap.Error(err))
				}
			}
			reported = k.Err()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Ready lists what the proxy still waits for: the signing keys, when it validates tokens.
func (p *Proxy) Ready() []string {
	st := p.state.Load()
	if st.validate && !st.validator.Keys.Loaded() {
		msg := "signing keys from " + st.validator.Keys.URL + " not loaded yet"
		if err := st.validator.Keys.Err(); err != nil {
			msg += ": " + err.Error()
		}
		return []string{msg}
	}
	return nil
}

// ServeHTTP admits the request when its path is public, or its bearer token is valid and the
// authorization policy allows it.
// The path is first made canonical (canonicalPath): the decision and the agent see the same one.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	removeSpellings(r.Header, proxySetHeaders)
	st := p.state.Load()
	if !st.validate {
		p.proxy.ServeHTTP(w, r)
		return
	}
	raw, decoded, err := canonicalPath(r.URL.EscapedPath())
	if err == nil && len(r.Header.Values("Authorization")) > 1 {
		// Authorization is a singleton field (RFC 9110 §11.6.2): the proxy would validate one
		// value, and the agent might read another.
		err = errors.New("more than one Authorization header")
	}
	if err == nil && Public(decoded) {
		r.URL.Path, r.URL.RawPath = decoded, raw
		p.proxy.ServeHTTP(w, r)
		return
	}
	if tracer := p.Tracing.Inbound(); tracer != nil {
		var span trace.Span
		w, r, span = startSpan(tracer, w, r, decoded, err == nil)
		defer tracing.EndRequest(span, w, trace.SpanKindServer)
	}
	if err != nil {
		p.log.Info("request refused", zap.String("error", ErrInvalidRequest), zap.String("reason", err.Error()))
		telemetry.Default.Request("bad_request")
		spanResult(r, "bad_request", ErrInvalidRequest)
		writeError(w, http.StatusBadRequest, ErrInvalidRequest, err.Error())
		return
	}
	r.URL.Path, r.URL.RawPath = decoded, raw
	token, ok := Bearer(r)
	if !ok {
		telemetry.Default.Request("unauthorized")
		spanResult(r, "unauthorized", ErrInvalidRequest)
		challenge(w, "", "")
		writeError(w, http.StatusUnauthorized, ErrInvalidRequest, "missing bearer token (Authorization: Bearer <token>)")
		return
	}
	claims, err := st.validator.Validate(r.Context(), token)
	if err != nil {
		var te *TokenError
		if !errors.As(err, &te) {
			te = invalid("%v", err)
		}
		status := http.StatusUnauthorized
		if te.Code == ErrInsufficientScope {
			status = http.StatusForbidden
		}
		p.log.Info("request refused", zap.String("path", r.URL.Path), zap.String("error", te.Code), zap.String("reason", te.Description))
		if status == http.StatusForbidden {
			telemetry.Default.Request("denied")
			spanResult(r, "denied", te.Code)
		} else {
			telemetry.Default.Request("unauthorized")
			spanResult(r, "unauthorized", te.Code)
		}
		challenge(w, te.Code, te.Description)
		writeError(w, status, te.Code, te.Description)
		return
	}
	spanClaims(r, claims)
	if !peerBound(w, r, claims, p.log) {
		spanResult(r, "denied", ErrPeerMismatch)
		return
	}
	az := st.authz
	for !az.acquire() { // a new configuration took over since st was loaded
		az = p.state.Load().authz
		if az == nil { // and validates no more: the previous configuration's policy is gone
			p.proxy.ServeHTTP(w, r)
			return
		}
	}
	allowed := p.authorize(w, r, az, claims)
	az.done()
	if claims.Request != nil {
		telemetry.Default.Call(claims.Request.Caller, claims.Request.Chain, allowed)
	}
	if !allowed {
		telemetry.Default.Request("denied")
		spanResult(r, "denied", ErrAccessDenied)
		return
	}
	telemetry.Default.Request("allowed")
	spanResult(r, "allowed", "")
	r.Header.Set(ClaimsHeader, strings.Split(token, ".")[1])
	p.proxy.ServeHTTP(w, r)
}

// Bearer returns the token of an "Authorization: Bearer" header (RFC 6750 §2.1): the token the
// inbound proxy validates, and the subject token the outbound proxy exchanges.
func Bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// challenge sets the RFC 6750 §3 WWW-Authenticate header.
func challenge(w http.ResponseWriter, code, description string) {
	v := `Bearer realm="kagenti"`
	if code != "" {
		v += fmt.Sprintf(`, error=%q, error_description="%s"`, code, headerSafe(description))
	}
	w.Header().Set("WWW-Authenticate", v)
}

// headerSafe keeps the characters RFC 6750 allows in error_description.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return '\''
		}
		return r
	}, s)
}

func writeError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}

// upstreamTransports returns the HTTP/1.1 transport and the h2c (HTTP/2 without TLS, prior
// knowledge) transport to the agent on loopback.
func upstreamTransports() (*http.Transport, *http.Transport) {
	h1 := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return h1, H2CTransport(h1)
}

// H2CTransport is a copy of h1 that speaks h2c (HTTP/2 without TLS, prior knowledge) only; the
// outbound proxy's upstream transports too.
func H2CTransport(h1 *http.Transport) *http.Transport {
	h2 := h1.Clone()
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetUnencryptedHTTP2(true)
	return h2
}

// protocolTransport forwards an HTTP/2 request over h2c and any other over HTTP/1.1, so that
// gRPC and other HTTP/2-only traffic keeps its protocol.
type protocolTransport struct{ h1, h2 http.RoundTripper }

func (t protocolTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return t.h2.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}

// ServerProtocols accepts HTTP/1.1 and h2c.
func ServerProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}
