package outbound

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*.svc.cluster.local", "a.b.svc.cluster.local", true},
		{"*.svc.cluster.local", "svc.cluster.local", false},
		{"*", "anything", true},
		{"api.*.com", "api.x.y.com", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"exact", "exact", true},
		{"exact", "exact.", false},
		{"**", "", true},
		{"*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
	} {
		assert.Equal(t, tc.want, glob(tc.pattern, tc.s), "%s ~ %s", tc.pattern, tc.s)
	}
}

func TestDecide(t *testing.T) {
	c := authconfig.Config{Outbound: authconfig.Outbound{Enabled: true, TokenExchange: authconfig.TokenExchange{
		Enabled: true, TokenURL: "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/token",
		DefaultTarget: authconfig.Target{Audience: "fallback"},
		Routes: []authconfig.Route{
			{Host: "api.example.com:8443", Target: authconfig.Target{Audience: "api-8443"}},
			{Host: "API.example.com", Target: authconfig.Target{Audience: "api"}},
			{Host: "*.internal", Passthrough: true},
		},
	}}}
	for _, tc := range []struct {
		host, port string
		want       Decision
	}{
		{"api.example.com", "8443", Decision{Exchange: true, Target: authconfig.Target{Audience: "api-8443"}, Rule: "api.example.com:8443"}},
		{"api.example.com:8443", "15123", Decision{Exchange: true, Target: authconfig.Target{Audience: "api"}, Rule: "API.example.com"}}, // a port in the name never counts
		{"api.example.com.", "80", Decision{Exchange: true, Target: authconfig.Target{Audience: "api"}, Rule: "API.example.com"}},
		{"db.internal", "80", Decision{Rule: "*.internal"}},
		{"10.0.0.7", "80", Decision{Exchange: true, Target: authconfig.Target{Audience: "fallback"}}},
		{"[fd00::1]:80", "80", Decision{Exchange: true, Target: authconfig.Target{Audience: "fallback"}}},
		{"keycloak.kagenti-system.svc", "8080", Decision{IdP: true}},
	} {
		assert.Equal(t, tc.want, Decide(c, tc.host, tc.port), "%s (port %s)", tc.host, tc.port)
	}
	c.Outbound.TokenExchange.Enabled = false
	assert.Equal(t, Decision{}, Decide(c, "api.example.com", "443"))
}

// TestDecidePassesTheIdPThrough: requests to any endpoint of the identity provider leave with
// their own token, on the IdP's port only: an agent on the same host or on the same port (8080
// is both the default Keycloak port and every agent's inbound port) is still exchanged for.
func TestDecidePassesTheIdPThrough(t *testing.T) {
	c := authconfig.Config{
		IdP: authconfig.IdP{Provider: authconfig.ProviderOIDC, Issuer: "https://idp.example.com",
			TokenURL: "http://idp-internal.example.com:9000/oauth/token", JWKSURL: "http://keys.example.com/jwks?x=1",
			RegistrationURL: "http://[fd00::5]:9001/register"},
		Inbound: authconfig.Inbound{Validation: authconfig.Validation{JWKSURL: "http://user@validation.example.com:8443/certs"}},
		Outbound: authconfig.Outbound{Enabled: true, TokenExchange: authconfig.TokenExchange{
			Enabled: true, TokenURL: "http://idp-internal.example.com:9000/oauth/token",
			DefaultTarget: authconfig.Target{Audience: "fallback"},
		}},
	}
	exchanged := Decision{Exchange: true, Target: authconfig.Target{Audience: "fallback"}}
	for _, tc := range []struct {
		host, port string
		want       Decision
	}{
		{"idp.example.com", "443", Decision{IdP: true}},
		{"IDP.example.com.", "443", Decision{IdP: true}},
		{"idp-internal.example.com:9000", "9000", Decision{IdP: true}},
		{"keys.example.com", "80", Decision{IdP: true}},
		{"[fd00::5]:9001", "9001", Decision{IdP: true}},
		{"validation.example.com:8443", "8443", Decision{IdP: true}},
		{"idp.example.com", "8080", exchanged},
		{"idp-internal.example.com", "8080", exchanged},
		{"agent-b.team.svc:8080", "8080", exchanged},
		{"[fd00::5]:8080", "8080", exchanged},
	} {
		assert.Equal(t, tc.want, Decide(c, tc.host, tc.port), "%s (port %s)", tc.host, tc.port)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want protocol
		done bool
	}{
		{"GET / HTTP/1.1\r\n", protoHTTP1, true},
		{"GE", protoOther, false},
		{"POST ", protoHTTP1, true},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", protoH2C, true},
		{"PRI * HTTP/2", protoOther, false},
		{"P", protoOther, false}, // POST, PUT, PATCH or PRI
		{"\x16\x03\x01", protoOther, true},
		{"SSH-2.0-", protoOther, true},
		{"GETX", protoOther, true},
	} {
		p, done := classify([]byte(tc.in))
		assert.Equal(t, tc.want, p, "%q", tc.in)
		assert.Equal(t, tc.done, done, "%q", tc.in)
	}
}

func TestCacheUntil(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	e := &Exchanger{Now: func() time.Time { return now }}
	assert.Equal(t, now.Add(270*time.Second), e.cacheUntil(now, 300*time.Second, "opaque"), "a tenth of 5 minutes")
	assert.Equal(t, now.Add(3570*time.Second), e.cacheUntil(now, time.Hour, "opaque"), "at most 30 s early")
	assert.Equal(t, now.Add(15*time.Second), e.cacheUntil(now, 20*time.Second, "opaque"), "at least 5 s early")
	subject := "h." + b64(`{"exp":1000060}`) + ".s"
	assert.Equal(t, time.Unix(1_000_060, 0), e.cacheUntil(now, 300*time.Second, subject), "never past the subject token's expiry")
}

func TestCacheIsBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	e := &Exchanger{Now: func() time.Time { return now }, MaxEntries: 3, cache: map[string]cached{}}
	for i, ttl := range []time.Duration{10, 20, 30, 40} {
		e.store(string(rune('a'+i)), "t", now.Add(ttl*time.Second))
	}
	assert.Len(t, e.cache, 3)
	assert.NotContains(t, e.cache, "a", "the entry expiring first made room")
}
