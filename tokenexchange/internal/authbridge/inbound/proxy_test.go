package inbound

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

const (
	issuer   = "http://idp.example/realms/agents"
	audience = "spiffe://cluster.local/ns/agents/sa/weather"
)

// agent is the workload behind the proxy: it echoes what reached it.
func agent(t testing.TB) (port int32) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Claims", r.Header.Get(ClaimsHeader))
		w.Header().Set("X-Seen-Authorization", r.Header.Get("Authorization"))
		w.Header().Set("X-Seen-Proto", r.Proto)
		w.Header().Set("X-Seen-URI", r.RequestURI)
		w.Header().Set("X-Seen-Traceparent", r.Header.Get("Traceparent"))
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		w.Header().Set("X-Seen-Body-SHA256", hex.EncodeToString(sum[:]))
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		w.Header().Set("X-Seen-Headers", strings.Join(names, ","))
		_, _ = io.WriteString(w, "agent: "+r.URL.Path)
	}))
	srv.Config.Protocols = ServerProtocols() // HTTP/1.1 and h2c, like a gRPC-capable agent
	srv.Start()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n)
}

type fixture struct {
	t     testing.TB
	key   idptest.Key
	jwks  *idptest.JWKSServer
	dir   string
	cfg   *sidecar.Config
	proxy *Proxy
	url   string
}

func source(dir string, jwksURL string, targetPort int32) sidecar.Source {
	p := func(i int32) *int32 { return &i }
	uid := int64(1337)
	return sidecar.Source{
		Dir:      dir,
		Workload: authconfig.Workload{Namespace: "agents", Name: "weather", ServiceAccount: "weather"},
		Defaults: authconfig.Spec{
			Spiffe:             &authconfig.SpiffeSpec{TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", Audience: "kagenti-agents"},
			ClientRegistration: &authconfig.ClientRegistrationSpec{Keycloak: &authconfig.KeycloakSpec{URL: "http://idp.example", Realm: "agents", ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}"}},
			Inbound: &authconfig.InboundSpec{Port: p(8080), TargetPort: p(targetPort),
				Validation: &authconfig.ValidationSpec{JWKSURL: jwksURL, RequiredScopes: []string{"agent:invoke"}}},
			Outbound: &authconfig.OutboundSpec{
				TrafficInterception: &authconfig.TrafficInterceptionSpec{ProxyPort: p(15123), ProxyUID: &uid},
				TokenExchange:       &authconfig.TokenExchangeSpec{DefaultTarget: &authconfig.ExchangeTarget{Audience: "downstream"}},
			},
		},
	}
}

func newFixture(t testing.TB) *fixture {
	log := zap.NewNop()
	if _, isTest := t.(*testing.T); isTest {
		log = zaptest.NewLogger(t)
	}
	return newLoggedFixture(t, log)
}

// newLoggedFixture is newFixture logging to log.
func newLoggedFixture(t testing.TB, log *zap.Logger) *fixture {
	f := &fixture{t: t, key: idptest.NewRSAKey(t, "k1"), dir: t.TempDir()}
	f.jwks = idptest.NewJWKSServer(t, f.key)
	var err error
	f.cfg, err = sidecar.NewConfig(source(f.dir, f.jwks.URL(), agent(t)), log)
	require.NoError(t, err)
	f.proxy = New(f.cfg, http.DefaultClient, log)
	srv := httptest.NewUnstartedServer(f.proxy)
	srv.Config.Protocols = ServerProtocols()
	srv.Start()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fixture) token(claims map[string]any) string { return f.key.Sign(f.t, claims) }

func (f *fixture) valid(extra map[string]any) map[string]any {
	c := idptest.Claims(issuer, audience, time.Minute, map[string]any{"scope": "openid agent:invoke"})
	for k, v := range extra {
		c[k] = v
	}
	return c
}

type answer struct {
	status    int
	challenge string
	body      map[string]string
	header    http.Header
	text      string
}

func (f *fixture) get(path, token string, hdr map[string]string) answer {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.url+path, nil)
	require.NoError(f.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate"), header: resp.Header, text: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a
}

func TestValidTokenReachesTheAgentWithItsClaims(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.valid(nil))
	a := f.get("/tasks", tok, map[string]string{ClaimsHeader: "forged"})
	require.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "agent: /tasks", a.text)
	assert.Equal(t, strings.Split(tok, ".")[1], a.header.Get("X-Seen-Claims"), "the agent gets the validated payload, never the client's header")
	payload, err := base64.RawURLEncoding.DecodeString(a.header.Get("X-Seen-Claims"))
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	assert.Equal(t, "user-1", claims["sub"])
	assert.Equal(t, "Bearer "+tok, a.header.Get("X-Seen-Authorization"), "the token goes on, for the agent's own calls")
}

func TestBadTokensAreRefusedWithTheReason(t *testing.T) {
	f := newFixture(t)
	other := idptest.NewRSAKey(t, "k1") // same key ID, different key: a forgery
	hmac := func() string {
		// HS256 keyed with the public key's bytes: the classic algorithm-confusion forgery.
		pub, _ := json.Marshal(f.key.Public())
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pub}, nil)
		require.NoError(t, err)
		obj, err := s.Sign(mustJSON(t, f.valid(nil)))
		require.NoError(t, err)
		out, err := obj.CompactSerialize()
		require.NoError(t, err)
		return out
	}
	unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(mustJSON(t, f.valid(nil))) + "."

	for name, tc := range map[string]struct {
		token, code, reason string
		status              int
	}{
		"missing":        {"", "invalid_request", "missing bearer token", 401},
		"garbage":        {"not.a.jwt", "invalid_token", "malformed or unsupported token", 401},
		"alg none":       {unsigned, "invalid_token", `unsigned token ("alg": "none")`, 401},
		"hmac confusion": {hmac(), "invalid_token", `algorithm "HS256" is not accepted`, 401},
		"forged":         {other.Sign(t, f.valid(nil)), "invalid_token", "signature verification failed", 401},
		"expired":        {f.token(f.valid(map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})), "invalid_token", "token expired at", 401},
		"no expiry":      {f.token(f.valid(map[string]any{"exp": nil})), "invalid_token", "token has no expiry", 401},
		"not yet valid":  {f.token(f.valid(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), "invalid_token", "not valid yet", 401},
		"wrong issuer":   {f.token(f.valid(map[string]any{"iss": "http://evil.example"})), "invalid_token", `issuer "http://evil.example" is not the expected`, 401},
		"wrong audience": {f.token(f.valid(map[string]any{"aud": "someone-else"})), "invalid_token", `audience [someone-else] does not include "spiffe://cluster.local/ns/agents/sa/weather"`, 401},
		"unknown key":    {idptest.NewRSAKey(t, "k9").Sign(t, f.valid(nil)), "invalid_token", `signed by unknown key "k9"`, 401},
		"missing scope":  {f.token(f.valid(map[string]any{"scope": "openid"})), "insufficient_scope", "missing scope(s) agent:invoke", 403},
	} {
		t.Run(name, func(t *testing.T) {
			a := f.get("/tasks", tc.token, nil)
			assert.Equal(t, tc.status, a.status, a.text)
			assert.Equal(t, tc.code, a.body["error"])
			assert.Contains(t, a.body["error_description"], tc.reason)
			assert.True(t, strings.HasPrefix(a.challenge, `Bearer realm="kagenti"`), a.challenge)
			if tc.token != "" {
				assert.Contains(t, a.challenge, `error="`+tc.code+`"`)
			}
			assert.NotContains(t, a.text, "agent: /", "nothing reached the agent")
		})
	}
}

func TestPublicPathsNeedNoToken(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"/.well-known/agent.json", "/.well-known/agent-card.json", "/healthz", "/readyz"} {
		a := f.get(p, "", map[string]string{ClaimsHeader: "forged"})
		assert.Equal(t, http.StatusOK, a.status, p)
		assert.Empty(t, a.header.Get("X-Seen-Claims"), "a client's claims header never reaches the agent")
	}
	assert.Equal(t, http.StatusUnauthorized, f.get("/healthz/x", "", nil).status)
	assert.Equal(t, http.StatusUnauthorized, f.get("/well-known/agent.json", "", nil).status)
}

func TestKeyRotation(t *testing.T) {
	f := newFixture(t)
	require.Equal(t, http.StatusOK, f.get("/", f.token(f.valid(nil)), nil).status)
	rotated := idptest.NewECKey(t, "k2")
	f.jwks.SetKeys(f.key, rotated) // the provider publishes the new key before it signs with it
	f.proxy.state.Load().validator.Keys.MinRefreshInterval = 0
	a := f.get("/", rotated.Sign(t, f.valid(nil)), nil)
	assert.Equal(t, http.StatusOK, a.status, "a token from the new key is accepted after a refresh: %s", a.text)
	f.jwks.SetKeys(rotated)
	assert.Equal(t, http.StatusOK, f.get("/", rotated.Sign(t, f.valid(nil)), nil).status)
}

func TestCachedKeysSurviveAnIdPOutage(t *testing.T) {
	f := newFixture(t)
	require.Equal(t, http.StatusOK, f.get("/", f.token(f.valid(nil)), nil).status)
	f.jwks.SetDown(true)
	ks := f.proxy.state.Load().validator.Keys
	ks.RefreshInterval = 0 // every use starts a background refresh: it fails, the keys stay
	another := f.token(f.valid(map[string]any{"jti": "not-cached-yet"}))
	assert.Equal(t, http.StatusOK, f.get("/", another, nil).status)
	settle(ks)
	assert.Error(t, ks.Err())
	assert.Empty(t, f.proxy.Ready(), "once loaded, an outage does not make the proxy unready")
}

func TestNotReadyUntilKeysLoad(t *testing.T) {
	f := newFixture(t)
	f.jwks.SetDown(true)
	assert.NotEmpty(t, f.proxy.Ready())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.proxy.Run(ctx)
	f.jwks.SetDown(false)
	deadline := time.Now().Add(10 * time.Second)
	for len(f.proxy.Ready()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.Empty(t, f.proxy.Ready())
}

func TestConfigChangeTakesEffect(t *testing.T) {
	f := newFixture(t)
	require.Equal(t, http.StatusForbidden, f.get("/", f.token(f.valid(map[string]any{"scope": "other"})), nil).status)
	writeConfig(t, f.dir, "inbound: {validation: {requiredScopes: [other]}}\n")
	f.cfg.Reload()
	assert.Equal(t, http.StatusOK, f.get("/", f.token(f.valid(map[string]any{"scope": "other"})), nil).status)

	writeConfig(t, f.dir, "inbound: {validation: {enabled: false}}\n")
	f.cfg.Reload()
	assert.Equal(t, http.StatusOK, f.get("/", "", nil).status, "validation off: requests pass")
}

// TestInboundDisabledTakesEffect: inbound.enabled false in config.yaml switches validation off at
// once, and the pod reports the inbound redirect (installed at pod start) as pending a restart.
func TestInboundDisabledTakesEffect(t *testing.T) {
	f := newFixture(t)
	require.Equal(t, http.StatusUnauthorized, f.get("/", "", nil).status)
	writeConfig(t, f.dir, "inbound: {enabled: false}\n")
	f.cfg.Reload()
	require.NoError(t, f.cfg.Err())
	assert.Equal(t, http.StatusOK, f.get("/", "", nil).status, "inbound off: requests pass without a token")
	assert.Equal(t, []string{"inbound.enabled"}, f.cfg.PendingRestart(), "the redirect changes at the next pod start")
}

func TestH2CIsForwarded(t *testing.T) {
	f := newFixture(t)
	c := &http.Client{Transport: func() *http.Transport {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		return tr
	}()}
	req, _ := http.NewRequest(http.MethodGet, f.url+"/tasks", nil)
	req.Header.Set("Authorization", "Bearer "+f.token(f.valid(nil)))
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "HTTP/2.0", resp.Header.Get("X-Seen-Proto"), "the agent is spoken to in the client's protocol")
}

// TestSigningKeysAreRefreshedAtTheConfiguredInterval: inbound.validation.jwksRefreshSeconds sets
// how old the held keys may grow before a background fetch, from the start and on a change of
// config.yaml; without it the data plane's default (identity.JWKSRefreshSeconds) holds.
func TestSigningKeysAreRefreshedAtTheConfiguredInterval(t *testing.T) {
	f := newFixture(t)
	require.Equal(t, http.StatusOK, f.get("/", f.token(f.valid(nil)), nil).status, "the keys are loaded")
	// dueAfter reports whether the key set in use would fetch again d after its last fetch.
	dueAfter := func(d time.Duration) bool {
		k := f.proxy.state.Load().validator.Keys
		k.mu.Lock()
		defer k.mu.Unlock()
		at := k.fetchedAt.Add(d)
		k.now = func() time.Time { return at }
		return k.dueLocked()
	}
	assert.False(t, dueAfter(599*time.Second), "the default: 600 s")
	assert.True(t, dueAfter(601*time.Second))

	writeConfig(t, f.dir, "inbound: {validation: {jwksRefreshSeconds: 30}}\n")
	f.cfg.Reload()
	require.NoError(t, f.cfg.Err())
	assert.False(t, dueAfter(29*time.Second))
	assert.True(t, dueAfter(31*time.Second), "config.yaml's 30 s")

	writeConfig(t, f.dir, "inbound: {validation: {jwksRefreshSeconds: 5}}\n")
	f.cfg.Reload()
	require.Error(t, f.cfg.Err())
	assert.Contains(t, f.cfg.Err().Error(), "inbound.validation.jwksRefreshSeconds: 5 is not 10 to 86400 seconds")
	assert.True(t, dueAfter(31*time.Second), "a rejected value leaves the one in effect")
}

func writeConfig(t *testing.T, dir, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.ConfigFile), []byte(content), 0o644))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
