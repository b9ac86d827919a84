package outbound

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// tokenEndpoint is an RFC 8693 token endpoint double: it checks the workload's credentials and
// issues "exchanged(<subject>→<audience>|<scope>)".
type tokenEndpoint struct {
	*httptest.Server
	mu       sync.Mutex
	calls    []url.Values
	down     bool
	refuse   string // an OAuth error to answer with
	lifetime int64
}

func newTokenEndpoint(t testing.TB) *tokenEndpoint {
	te := &tokenEndpoint{lifetime: 300}
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te.mu.Lock()
		defer te.mu.Unlock()
		if te.down {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		_ = r.ParseForm()
		form := r.PostForm
		if id, secret, ok := r.BasicAuth(); ok {
			// RFC 6749 §2.3.1: the client ID and secret are form-encoded inside Basic.
			id, _ = url.QueryUnescape(id)
			secret, _ = url.QueryUnescape(secret)
			form.Set("basic_id", id)
			form.Set("basic_secret", secret)
		}
		te.calls = append(te.calls, form)
		w.Header().Set("Content-Type", "application/json")
		if te.refuse != "" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": te.refuse, "error_description": "subject token not allowed"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"access_token":      fmt.Sprintf("exchanged(%s→%s|%s)", form.Get("subject_token"), form.Get("audience"), form.Get("scope")),
			"issued_token_type": TokenTypeAccessToken, "token_type": "Bearer", "expires_in": te.lifetime,
		})
	}))
	t.Cleanup(te.Close)
	return te
}

func (te *tokenEndpoint) Calls() []url.Values {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]url.Values(nil), te.calls...)
}

func (te *tokenEndpoint) set(f func(*tokenEndpoint)) { te.mu.Lock(); f(te); te.mu.Unlock() }

// callee echoes what reached it; it speaks HTTP/1.1 and h2c.
func callee(t testing.TB) netip.AddrPort {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s host=%s auth=%s", r.Proto, r.Host, r.Header.Get("Authorization"))
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

type fixture struct {
	t      testing.TB
	idp    *tokenEndpoint
	shared string
	dir    string
	cfg    *sidecar.Config
	proxy  *Proxy
	creds  *CredentialSource
	addr   string
	dst    atomic.Pointer[netip.AddrPort] // where the "redirected" connections were going
	dns    *fakeDNS
	logs   *observer.ObservedLogs // the proxy's log at info level and above (audit records)
}

// fixtureDNS: the names the tests call resolve to the loopback address their servers listen on;
// elsewhere.googleapis.com matches the pass-through rule but is somewhere else.
var fixtureDNS = map[string]string{
	"api.example.com": "127.0.0.1", "svc.example.com": "127.0.0.1", "weather.tools.svc.cluster.local": "127.0.0.1",
	"storage.googleapis.com": "127.0.0.1", "elsewhere.example.org": "127.0.0.1", "elsewhere.googleapis.com": "192.0.2.1",
}

const rules = `outbound:
  tokenExchange:
    defaultTarget: {audience: fallback}
    destinationRules:
    - match: {host: "api.example.com"}
      target: {audience: api, scopes: [read, write]}
    - match: {host: "svc.example.com:9443"}
      target: {audience: svc-tls-port}
    - match: {host: "*.tools.svc.cluster.local"}
      target: {audience: tools}
    - match: {host: "*.googleapis.com"}
`

func newFixture(t testing.TB, configYAML string) *fixture {
	f := &fixture{t: t, idp: newTokenEndpoint(t), shared: t.TempDir(), dir: t.TempDir()}
	require.NoError(t, os.WriteFile(filepath.Join(f.shared, authconfig.ClientIDFile), []byte("agents/caller\n"), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(f.shared, authconfig.ClientSecretFile), []byte("s3cret:&=\n"), 0o640))
	if configYAML != "" {
		require.NoError(t, os.WriteFile(filepath.Join(f.dir, authconfig.ConfigFile), []byte(configYAML), 0o644))
	}
	p := func(i int32) *int32 { return &i }
	uid := int64(1337)
	src := sidecar.Source{
		Dir:      f.dir,
		Workload: authconfig.Workload{Namespace: "agents", Name: "caller", ServiceAccount: "caller"},
		Defaults: authconfig.Spec{
			Spiffe: &authconfig.SpiffeSpec{TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", Audience: "kagenti-agents"},
			ClientRegistration: &authconfig.ClientRegistrationSpec{Provider: "oidc", OIDC: &authconfig.OIDCSpec{
				Issuer: f.idp.URL, TokenURL: f.idp.URL + "/token", JWKSURL: f.idp.URL + "/keys", RegistrationURL: f.idp.URL + "/register"},
				Keycloak: &authconfig.KeycloakSpec{ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}"}},
			Inbound: &authconfig.InboundSpec{Port: p(8080), TargetPort: p(8081)},
			Outbound: &authconfig.OutboundSpec{
				TrafficInterception: &authconfig.TrafficInterceptionSpec{ProxyPort: p(15123), ProxyUID: &uid},
				TokenExchange:       &authconfig.TokenExchangeSpec{DefaultTarget: &authconfig.ExchangeTarget{Audience: "downstream"}},
			},
		},
	}
	log := zap.NewNop()
	if _, isTest := t.(*testing.T); isTest {
		log = zaptest.NewLogger(t)
	}
	observed, logs := observer.New(zap.InfoLevel)
	f.logs, log = logs, zap.New(zapcore.NewTee(log.Core(), observed))
	var err error
	f.cfg, err = sidecar.NewConfig(src, log)
	require.NoError(t, err)
	require.NoError(t, f.cfg.Err())
	f.creds = NewCredentialSource(f.shared)
	f.proxy = New(f.cfg, f.creds, NewExchanger(http.DefaultClient), log)
	f.proxy.Destination = func(net.Conn) (netip.AddrPort, error) {
		if dst := f.dst.Load(); dst != nil {
			return *dst, nil
		}
		return netip.AddrPort{}, errors.New("connection was not redirected (no conntrack NAT entry)") // as OriginalDestination
	}
	f.dns = newFakeDNS(fixtureDNS)
	f.proxy.Resolver = f.dns
	f.proxy.DetectionTimeout = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.proxy.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	f.addr = ln.Addr().String()
	return f
}

// call sends a request for host through the proxy, as if the client connected to dst.
func (f *fixture) call(dst netip.AddrPort, host, token string) (int, string) {
	f.t.Helper()
	f.dst.Store(&dst)
	req, err := http.NewRequest(http.MethodGet, "http://"+f.addr+"/path", nil)
	require.NoError(f.t, err)
	req.Host = host
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// A fresh connection per call, so that each one is "redirected" to the dst set above.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRoutesDecideTheExchangedToken(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	for _, tc := range []struct{ host, want string }{
		{"api.example.com", "auth=Bearer exchanged(user-token→api|read write)"},
		{"API.example.com:80", "auth=Bearer exchanged(user-token→api|read write)"},
		{"svc.example.com:9443", "auth=Bearer exchanged(user-token→fallback|)"}, // the destination's port is not 9443
		{"svc.example.com", "auth=Bearer exchanged(user-token→fallback|)"},
		{"weather.tools.svc.cluster.local", "auth=Bearer exchanged(user-token→tools|)"},
		{"storage.googleapis.com", "auth=Bearer user-token"}, // pass-through rule
		{"elsewhere.example.org", "auth=Bearer exchanged(user-token→fallback|)"},
	} {
		status, body := f.call(up, tc.host, "user-token")
		assert.Equal(t, http.StatusOK, status, tc.host)
		assert.Contains(t, body, tc.want, tc.host)
		assert.Contains(t, body, "host="+tc.host, "the Host header is kept")
	}
	call := f.idp.Calls()[0]
	assert.Equal(t, GrantTokenExchange, call.Get("grant_type"))
	assert.Equal(t, TokenTypeAccessToken, call.Get("subject_token_type"))
	assert.Equal(t, TokenTypeAccessToken, call.Get("requested_token_type"))
	assert.Equal(t, "agents/caller", call.Get("basic_id"), "client_secret_basic with the registered client")
	assert.Equal(t, "s3cret:&=", call.Get("basic_secret"))
}

func TestExchangedTokensAreCached(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	for range 5 {
		status, _ := f.call(up, "api.example.com", "user-token")
		require.Equal(t, http.StatusOK, status)
	}
	assert.Len(t, f.idp.Calls(), 1, "one exchange for five requests")
	f.call(up, "api.example.com", "another-user")
	assert.Len(t, f.idp.Calls(), 2, "another subject token is another exchange")
}

func TestIdPOutage(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	status, _ := f.call(up, "api.example.com", "cached-user")
	require.Equal(t, http.StatusOK, status)
	f.idp.set(func(te *tokenEndpoint) { te.down = true })

	status, body := f.call(up, "api.example.com", "new-user")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, `exchanging the token for audience \"api\" (destination api.example.com) failed: identity provider at `)
	assert.Contains(t, body, "answered 503 Service Unavailable")

	status, body = f.call(up, "api.example.com", "cached-user")
	assert.Equal(t, http.StatusOK, status, "a cached token keeps working while the provider is down")
	assert.Contains(t, body, "exchanged(cached-user→api")

	f.idp.Close()
	status, body = f.call(up, "api.example.com", "new-user")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "identity provider unreachable at")
}

func TestRefusedExchangeIsForbidden(t *testing.T) {
	f := newFixture(t, rules)
	f.idp.set(func(te *tokenEndpoint) { te.refuse = "invalid_grant" })
	status, body := f.call(callee(t), "api.example.com", "user-token")
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "invalid_grant (subject token not allowed)")

	f.idp.set(func(te *tokenEndpoint) { te.refuse = "invalid_client" })
	status, _ = f.call(callee(t), "api.example.com", "user-token-2")
	assert.Equal(t, http.StatusBadGateway, status, "the workload's own credentials were refused: not the caller's fault")
}

func TestRequestsWithoutTokenOrExchangePassThrough(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	_, body := f.call(up, "api.example.com", "")
	assert.True(t, strings.HasSuffix(body, "auth="), "no token, nothing to exchange: %s", body)
	assert.Empty(t, f.idp.Calls())

	writeConfig(t, f.dir, rules+"    enabled: false\n")
	f.cfg.Reload()
	require.NoError(t, f.cfg.Err())
	_, body = f.call(up, "api.example.com", "user-token")
	assert.Contains(t, body, "auth=Bearer user-token", "exchange off: every token passes through")
}

func TestTokenEndpointIsNeverExchanged(t *testing.T) {
	f := newFixture(t, rules)
	u, _ := url.Parse(f.idp.URL)
	status, _ := f.call(netip.MustParseAddrPort(u.Host), u.Host, "user-token")
	assert.Equal(t, http.StatusMethodNotAllowed, status, "the token endpoint got the request as sent (and refused the GET)")
	assert.Empty(t, f.idp.Calls(), "no exchange for a request to the identity provider")
}

// TestForgedHostLeavesNoTokenUnexchanged: a request whose Host names the identity provider or a
// pass-through host, on a connection to somewhere else, is exchanged as its real destination says;
// the caller's own token never leaves with it.
func TestForgedHostLeavesNoTokenUnexchanged(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	idp, _ := url.Parse(f.idp.URL)
	for _, host := range []string{
		idp.Host,                        // the token endpoint's address and port, on a connection to the callee's port
		"elsewhere.googleapis.com",      // a pass-through rule's host that resolves elsewhere
		"unresolvable.googleapis.com",   // a pass-through rule's host that does not resolve
		"storage.googleapis.com:" + "1", // a pass-through host that resolves here, with a port: exchanged below
	} {
		status, body := f.call(up, host, "user-token")
		require.Equal(t, http.StatusOK, status, "%s: %s", host, body)
		if host == "storage.googleapis.com:1" {
			assert.Contains(t, body, "auth=Bearer user-token", "%s: the name is the destination: its rule applies, whatever the port in Host", host)
			continue
		}
		assert.Contains(t, body, "auth=Bearer exchanged(user-token→fallback|)", host)
	}
	assert.Len(t, f.idp.Calls(), 1, "one exchange, cached")
}

// TestRepeatedAuthorizationIsRefused: a request with two Authorization headers on a route that
// exchanges is refused: the proxy would exchange (or, were the first not a bearer token, skip) one
// value while the destination might read the other, the caller's own token.
func TestRepeatedAuthorizationIsRefused(t *testing.T) {
	f := newFixture(t, rules)
	f.dst.Store(new(callee(t)))
	for _, values := range [][]string{{"Basic Zm9vOmJhcg==", "Bearer user-token"}, {"Bearer user-token", "Bearer other"}} {
		req, err := http.NewRequest(http.MethodGet, "http://"+f.addr+"/", nil)
		require.NoError(t, err)
		req.Host = "api.example.com"
		req.Header["Authorization"] = values
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%v: %s", values, b)
		assert.Contains(t, string(b), "more than one Authorization header")
	}
	assert.Empty(t, f.idp.Calls())
}

func TestRouteChangeTakesEffectWithoutRestart(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	_, body := f.call(up, "api.example.com", "user-token")
	require.Contains(t, body, "→api|")
	writeConfig(t, f.dir, strings.Replace(rules, "audience: api,", "audience: api-v2,", 1))
	f.cfg.Reload()
	_, body = f.call(up, "api.example.com", "user-token")
	assert.Contains(t, body, "→api-v2|")
}

func TestMissingCredentials(t *testing.T) {
	f := newFixture(t, rules)
	require.NoError(t, os.Remove(filepath.Join(f.shared, authconfig.ClientSecretFile)))
	f2 := NewCredentialSource(f.shared)
	_, err := f2.Get(f.cfg.Current().Config)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no client credentials yet")
	f.proxy.creds = f2
	status, body := f.call(callee(t), "api.example.com", "user-token")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "client-secret.txt")
	assert.NotEmpty(t, f.proxy.Ready())
}

func TestJWTSVIDAuthentication(t *testing.T) {
	f := newFixture(t, rules+"clientRegistration: {enabled: false}\n")
	svid := "eyJhbGciOiJFUzI1NiJ9." + b64(`{"sub":"spiffe://cluster.local/ns/agents/sa/caller","exp":`+fmt.Sprint(time.Now().Add(time.Hour).Unix())+`}`) + ".sig"
	require.NoError(t, os.WriteFile(filepath.Join(f.shared, authconfig.JWTSVIDFile), []byte(svid), 0o640))
	f.creds.Refresh()
	status, _ := f.call(callee(t), "api.example.com", "user-token")
	require.Equal(t, http.StatusOK, status)
	call := f.idp.Calls()[0]
	assert.Equal(t, AssertionTypeJWT, call.Get("client_assertion_type"))
	assert.Equal(t, svid, call.Get("client_assertion"))
	assert.Equal(t, "spiffe://cluster.local/ns/agents/sa/caller", call.Get("client_id"))
	assert.Empty(t, call.Get("basic_id"))

	expired := "eyJhbGciOiJFUzI1NiJ9." + b64(`{"exp":1}`) + ".sig"
	require.NoError(t, os.WriteFile(filepath.Join(f.shared, authconfig.JWTSVIDFile), []byte(expired), 0o640))
	f.creds.Refresh()
	_, err := f.creds.Get(f.cfg.Current().Config)
	assert.ErrorContains(t, err, "expired")
}

func TestH2CThroughTheProxy(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	f.dst.Store(&up)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	req, _ := http.NewRequest(http.MethodGet, "http://"+f.addr+"/", nil)
	req.Host = "api.example.com"
	req.Header.Set("Authorization", "Bearer user-token")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Contains(t, string(b), "proto=HTTP/2.0 host=api.example.com auth=Bearer exchanged(user-token→api|read write)")
}

// echoServer stands for a database or a TLS server: it echoes what it receives, after a greeting
// when it speaks first. Every connection it accepts is announced on the returned channel.
func echoServer(t *testing.T, greeting string) (netip.AddrPort, <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() {
				_, _ = io.WriteString(c, greeting)
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()), accepted
}

func TestNonHTTPTrafficIsTunnelledUntouched(t *testing.T) {
	f := newFixture(t, rules)
	dst, accepted := echoServer(t, "")
	f.dst.Store(&dst)
	for name, payload := range map[string]string{
		"tls client hello": "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 Authorization: Bearer x",
		"binary":           "\x00\x01\x02\x03 hello",
		"almost HTTP":      "GETX / HTTP/1.1\r\n\r\n",
		"late bytes":       "", // the client says nothing within the detection timeout, then speaks
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", f.addr)
			require.NoError(t, err)
			defer c.Close()
			if payload == "" {
				<-accepted // the proxy gave up waiting and connected to the destination
				payload = "late bytes"
			}
			_, err = c.Write([]byte(payload))
			require.NoError(t, err)
			got := make([]byte, len(payload))
			_, err = io.ReadFull(bufio.NewReader(c), got)
			require.NoError(t, err)
			assert.Equal(t, payload, string(got))
		})
		for len(accepted) > 0 {
			<-accepted
		}
	}
	assert.Empty(t, f.idp.Calls())
}

func TestServerFirstProtocolIsTunnelled(t *testing.T) {
	f := newFixture(t, rules)
	dst, _ := echoServer(t, "220 mail.example.com ESMTP ready\r\n")
	f.dst.Store(&dst)
	c, err := net.Dial("tcp", f.addr)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	greeting, err := r.ReadString('\n') // the client waits for the server to speak first
	require.NoError(t, err)
	assert.Equal(t, "220 mail.example.com ESMTP ready\r\n", greeting)
	_, err = io.WriteString(c, "EHLO client.example.com\r\n")
	require.NoError(t, err)
	echo, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "EHLO client.example.com\r\n", echo)
}

// TestIdPOutage flaked under load: its fixture's detection timeout is 200 ms, and a client whose
// request reached the proxy later (the test process descheduled) was tunnelled untouched, so its
// token was not exchanged (200 where 502 was expected, and no cached token for the next call).
// That was a real defect: the HTTP request of a late client went to its destination with the
// caller's own token. A late client's HTTP request is now proxied, and exchanged, as any other.
func TestLateHTTPClientIsStillExchanged(t *testing.T) {
	f := newFixture(t, rules)
	accepted := make(chan struct{}, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	dst := netip.MustParseAddrPort(srv.Listener.Addr().String())
	f.dst.Store(&dst)

	c, err := net.Dial("tcp", f.addr)
	require.NoError(t, err)
	defer c.Close()
	<-accepted // the proxy gave up waiting for the client's first bytes and connected to the destination
	_, err = io.WriteString(c, "GET /path HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer user-token\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "auth=Bearer exchanged(user-token→api|read write)", string(b), "the late request's token is exchanged, not passed through")
	assert.Len(t, f.idp.Calls(), 1)
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func writeConfig(t *testing.T, dir, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.ConfigFile), []byte(content), 0o644))
}

// TestSVIDIsSentAsActorTokenWhenDelegationIsChained: with SPIFFE credentials and delegation
// chained, the workload's JWT SVID is the RFC 8693 actor_token (type jwt), so that the identity
// provider names the workload in act; with immediateCaller (the default) none is sent, nor by a
// registered client (its client ID names it).
func TestSVIDIsSentAsActorTokenWhenDelegationIsChained(t *testing.T) {
	chained := strings.Replace(rules, "  tokenExchange:\n", "  tokenExchange:\n    delegation: chained\n", 1)
	f := newFixture(t, chained+"clientRegistration: {enabled: false}\n")
	svid := "eyJhbGciOiJFUzI1NiJ9." + b64(`{"sub":"spiffe://cluster.local/ns/agents/sa/caller","exp":`+fmt.Sprint(time.Now().Add(time.Hour).Unix())+`}`) + ".sig"
	require.NoError(t, os.WriteFile(filepath.Join(f.shared, authconfig.JWTSVIDFile), []byte(svid), 0o640))
	f.creds.Refresh()
	status, body := f.call(callee(t), "api.example.com", "user-token")
	require.Equal(t, http.StatusOK, status, body)
	call := f.idp.Calls()[0]
	assert.Equal(t, svid, call.Get("actor_token"))
	assert.Equal(t, TokenTypeJWT, call.Get("actor_token_type"))

	for name, cfg := range map[string]string{
		"immediateCaller":   rules + "clientRegistration: {enabled: false}\n",
		"registered client": chained,
	} {
		g := newFixture(t, cfg)
		require.NoError(t, os.WriteFile(filepath.Join(g.shared, authconfig.JWTSVIDFile), []byte(svid), 0o640))
		g.creds.Refresh()
		status, body = g.call(callee(t), "api.example.com", "user-token")
		require.Equal(t, http.StatusOK, status, body)
		assert.Empty(t, g.idp.Calls()[0].Get("actor_token"), "%s: no actor token", name)
	}
}

// TestScopesOnlyNarrowAlongTheChain: the outbound proxy does not ask for a scope the caller's
// token lacks (403 scope_not_delegated naming it, no call to the identity provider), unless the
// route's target allows escalation.
func TestScopesOnlyNarrowAlongTheChain(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	jwtWith := func(scope string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + b64(`{"sub":"user","scope":"`+scope+`"}`) + ".sig"
	}
	status, body := f.call(up, "api.example.com", jwtWith("read"))
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, `"error":"scope_not_delegated"`)
	assert.Contains(t, body, `scope \"write\"`)
	assert.Empty(t, f.idp.Calls(), "refused before the identity provider is asked")

	status, body = f.call(up, "api.example.com", jwtWith("read write admin"))
	assert.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "|read write)", "the route's scopes, fewer than the token's")

	g := newFixture(t, strings.Replace(rules, "scopes: [read, write]}", "scopes: [read, write], allowScopeEscalation: true}", 1))
	status, body = g.call(up, "api.example.com", jwtWith("read"))
	assert.Equal(t, http.StatusOK, status, "allowScopeEscalation lets the provider decide: %s", body)
	assert.Len(t, g.idp.Calls(), 1)
}

// clientAuthentication jwtSVID: the client kagenti-tokenexchange registered (its ID in
// config.yaml) authenticates with the workload's JWT SVID; the secret on the shared volume, if
// any, is never sent. Until the controller has written the ID, the proxy says what it waits for.
func TestRegisteredClientAuthenticatesWithItsJWTSVID(t *testing.T) {
	f := newFixture(t, rules+"clientRegistration: {clientAuthentication: jwtSVID}\n")
	svid := "eyJhbGciOiJFUzI1NiJ9." + b64(`{"sub":"spiffe://cluster.local/ns/agents/sa/caller","exp":`+fmt.Sprint(time.Now().Add(time.Hour).Unix())+`}`) + ".sig"
	require.NoError(t, os.WriteFile(filepath.Join(f.shared, authconfig.JWTSVIDFile), []byte(svid), 0o640))
	f.creds.Refresh()

	status, body := f.call(callee(t), "api.example.com", "user-token")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "kagenti-tokenexchange registers it")
	assert.Empty(t, f.idp.Calls())

	writeConfig(t, f.dir, rules+"clientRegistration: {clientAuthentication: jwtSVID, clientId: dyn-42}\n")
	f.cfg.Reload()
	status, body = f.call(callee(t), "api.example.com", "user-token")
	require.Equal(t, http.StatusOK, status, body)
	call := f.idp.Calls()[0]
	assert.Equal(t, AssertionTypeJWT, call.Get("client_assertion_type"))
	assert.Equal(t, svid, call.Get("client_assertion"))
	assert.Equal(t, "dyn-42", call.Get("client_id"))
	assert.Empty(t, call.Get("basic_id"), "no client secret is sent")
}
