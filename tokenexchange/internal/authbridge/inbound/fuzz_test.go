package inbound

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

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
