package inbound

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

// FuzzValidateToken feeds arbitrary strings to the validator: it never panics, and it accepts
// nothing whose signed part (header and payload) differs from a token the provider signed.
//
//	go test ./internal/authbridge/inbound -run '^$' -fuzz FuzzValidateToken -fuzztime 60s
func FuzzValidateToken(f *testing.F) {
	key := idptest.NewRSAKey(f, "k1")
	jwks := idptest.NewJWKSServer(f, key)
	claims := idptest.Claims(issuer, audience, time.Hour, map[string]any{"scope": "agent:invoke"})
	valid := key.Sign(f, claims)
	v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience, RequiredScopes: []string{"agent:invoke"}}}
	signed := valid[:strings.LastIndex(valid, ".")]
	for _, seed := range []string{valid, signed + ".", "a.b.c", "", ".", "..", "eyJhbGciOiJub25lIn0.e30.", valid + "." + valid} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Validate(context.Background(), token)
		if err != nil {
			if _, ok := err.(*TokenError); !ok {
				t.Fatalf("error of type %T, want *TokenError: %v", err, err)
			}
			return
		}
		if c == nil || !strings.HasPrefix(token, signed+".") {
			t.Fatalf("accepted a token the provider did not sign: %q", token)
		}
	})
}

// FuzzBearerHeader feeds arbitrary Authorization header values through the proxy's parsing
// (Bearer) to the validator: a token comes out only of a "Bearer" scheme (any case), trimmed
// and non-empty; only the provider's own token is accepted.
//
//	go test ./internal/authbridge/inbound -run '^$' -fuzz FuzzBearerHeader -fuzztime 60s
func FuzzBearerHeader(f *testing.F) {
	key := idptest.NewECKey(f, "k1")
	jwks := idptest.NewJWKSServer(f, key)
	valid := key.Sign(f, idptest.Claims(issuer, audience, time.Hour, map[string]any{"scope": "agent:invoke"}))
	v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience, RequiredScopes: []string{"agent:invoke"}}}
	for _, seed := range []string{"Bearer " + valid, "bearer " + valid, "BEARER  " + valid + " ", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer\t" + valid, valid, "Bearer a.b.c", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := &http.Request{Header: http.Header{"Authorization": {header}}}
		token, ok := Bearer(r)
		scheme, _, hasSpace := strings.Cut(header, " ")
		if !ok {
			require.Empty(t, token)
			return
		}
		require.True(t, hasSpace && strings.EqualFold(scheme, "Bearer"), "a token from a header without the Bearer scheme: %q", header)
		require.NotEmpty(t, token)
		require.Equal(t, strings.TrimSpace(token), token)
		if _, err := v.Validate(context.Background(), token); err == nil {
			require.Equal(t, valid, token, "accepted a token the provider did not sign")
		}
	})
}

// FuzzTokenClaims signs arbitrary JSON payloads with the provider's key: whatever the claims'
// shapes (strings for numbers, lists for strings, nested objects), the validator never panics,
// and it accepts a token only when the claims satisfy the policy as read independently here.
//
//	go test ./internal/authbridge/inbound -run '^$' -fuzz FuzzTokenClaims -fuzztime 60s
func FuzzTokenClaims(f *testing.F) {
	key := idptest.NewECKey(f, "k1")
	jwks := idptest.NewJWKSServer(f, key)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key.Signer, KeyID: key.ID}}, nil)
	require.NoError(f, err)
	v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience, RequiredScopes: []string{"agent:invoke"}}}
	for _, c := range []map[string]any{
		idptest.Claims(issuer, audience, time.Hour, map[string]any{"scope": "openid agent:invoke"}),
		idptest.Claims(issuer, audience, time.Hour, map[string]any{"scp": []any{"agent:invoke", 3}}),
		idptest.Claims(issuer, audience, -time.Hour, map[string]any{"scope": "agent:invoke"}),
		idptest.Claims(issuer, "other", time.Hour, map[string]any{"scope": "agent:invoke"}),
		idptest.Claims("http://evil", audience, time.Hour, map[string]any{"scope": "agent:invoke"}),
		{"iss": issuer, "aud": []any{audience, 1}, "exp": "soon", "scope": "agent:invoke"},
		{"iss": issuer, "aud": audience, "exp": 1e300, "scope": map[string]any{"a": 1}},
	} {
		b, err := json.Marshal(c)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("null"))
	f.Add([]byte(`{"iss":"` + issuer + `","aud":"` + audience + `","exp":9999999999,"nbf":-1e20,"scope":"agent:invoke agent:invoke"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		jws, err := signer.Sign(payload)
		require.NoError(t, err)
		token, err := jws.CompactSerialize()
		require.NoError(t, err)
		c, err := v.Validate(context.Background(), token)
		if err != nil {
			var te *TokenError
			require.ErrorAs(t, err, &te)
			return
		}
		// Accepted: the policy holds on the payload as plain JSON.
		var raw map[string]any
		require.NoError(t, json.Unmarshal(payload, &raw))
		require.Equal(t, issuer, raw["iss"])
		switch aud := raw["aud"].(type) {
		case string:
			require.Equal(t, audience, aud)
		case []any:
			require.Contains(t, aud, any(audience))
		default:
			t.Fatalf("accepted an audience of type %T", aud)
		}
		exp, ok := raw["exp"].(float64)
		require.True(t, ok, "accepted a token without a numeric exp")
		require.Greater(t, exp, float64(time.Now().Add(-Leeway-time.Minute).Unix()), "accepted an expired token")
		require.Contains(t, c.Scopes, "agent:invoke")
	})
}

// FuzzRPCMethodOf: no body makes the JSON-RPC method reader panic, and a method it returns is the
// one encoding/json reads from the same body (what a Go agent would dispatch on).
//
//	go test ./internal/authbridge/inbound -run '^$' -fuzz FuzzRPCMethodOf -fuzztime 60s
func FuzzRPCMethodOf(f *testing.F) {
	for _, seed := range []string{`{"jsonrpc":"2.0","method":"tasks/get","id":1}`, `[{"method":"a"}]`, `{"method":"a","Method":"b"}`,
		"\xEF\xBB\xBF{}", `{"method":1}`, `{"a":{"method":"x"}}`, `{} {}`, ``, `x`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		method, err := rpcMethodOf(body)
		if err != nil || method == "" {
			return
		}
		var req struct{ Method string }
		if json.Unmarshal(body, &req) != nil || req.Method != method {
			t.Fatalf("read %q, encoding/json reads %q from %q", method, req.Method, body)
		}
	})
}
