package inbound

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

// chain nests act claims, the current actor first: chain("middle", "caller") is
// {sub: middle, act: {sub: caller}}.
func chain(actors ...string) map[string]any {
	var act map[string]any
	for i := len(actors) - 1; i >= 0; i-- {
		next := map[string]any{"sub": actors[i]}
		if act != nil {
			next["act"] = act
		}
		act = next
	}
	return act
}

// TestAnAlteredInnerActFailsTheSignature: the act chain is part of the signed payload, so a hop
// rewritten after signing (the inner actor replaced, or one removed) breaks the signature, and
// the inbound proxy refuses the token; nothing reaches the agent.
func TestAnAlteredInnerActFailsTheSignature(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.valid(map[string]any{"act": chain("middle", "caller")}))
	require.Equal(t, http.StatusOK, f.get("/tasks", tok, nil).status, "the untouched token is accepted")

	parts := strings.Split(tok, ".")
	for name, alter := range map[string]func(map[string]any){
		"inner actor replaced": func(c map[string]any) { c["act"] = chain("middle", "attacker") },
		"hop removed":          func(c map[string]any) { c["act"] = chain("middle") },
		"hop added":            func(c map[string]any) { c["act"] = chain("attacker", "middle", "caller") },
	} {
		t.Run(name, func(t *testing.T) {
			b, err := base64.RawURLEncoding.DecodeString(parts[1])
			require.NoError(t, err)
			var claims map[string]any
			require.NoError(t, json.Unmarshal(b, &claims))
			alter(claims)
			forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(mustJSON(t, claims)) + "." + parts[2]
			a := f.get("/tasks", forged, nil)
			assert.Equal(t, http.StatusUnauthorized, a.status, a.text)
			assert.Equal(t, "invalid_token", a.body["error"])
			assert.Contains(t, a.body["error_description"], "signature verification failed")
			assert.NotContains(t, a.text, "agent: /", "nothing reached the agent")
		})
	}
}

// TestAPlausibleChainSignedByAnotherKeyIsRefused: a well-formed token with a believable chain,
// signed by a key that is not the issuer's (under the issuer's key ID), is refused.
func TestAPlausibleChainSignedByAnotherKeyIsRefused(t *testing.T) {
	f := newFixture(t)
	other := idptest.NewRSAKey(t, "k1")
	a := f.get("/tasks", other.Sign(t, f.valid(map[string]any{"act": chain("spiffe://cluster.local/ns/agents/sa/middle", "spiffe://cluster.local/ns/agents/sa/caller")})), nil)
	assert.Equal(t, http.StatusUnauthorized, a.status, a.text)
	assert.Contains(t, a.body["error_description"], "signature verification failed")
	assert.NotContains(t, a.text, "agent: /")
}

// TestAChainPastTheDepthIsRefused: a signed token whose act nests deeper than the limit (or is
// malformed) is refused as invalid_token with the reason.
func TestAChainPastTheDepthIsRefused(t *testing.T) {
	f := newFixture(t)
	deep := make([]string, 9)
	for i := range deep {
		deep[i] = "hop"
	}
	for name, tc := range map[string]struct {
		act    any
		reason string
	}{
		"deeper than 8":  {chain(deep...), "more than 8 actors"},
		"act not object": {"caller", "act at depth 1 is not an object"},
		"inner no sub":   {map[string]any{"sub": "middle", "act": map[string]any{"client_id": "x"}}, "act at depth 2 has no sub"},
	} {
		t.Run(name, func(t *testing.T) {
			a := f.get("/tasks", f.token(f.valid(map[string]any{"act": tc.act})), nil)
			assert.Equal(t, http.StatusUnauthorized, a.status, a.text)
			assert.Equal(t, "invalid_token", a.body["error"])
			assert.Contains(t, a.body["error_description"], "delegation chain: "+tc.reason)
			assert.NotContains(t, a.text, "agent: /")
		})
	}
	a := f.get("/tasks", f.token(f.valid(map[string]any{"act": chain(deep[:8]...)})), nil)
	assert.Equal(t, http.StatusOK, a.status, "a chain of exactly 8 is within the limit: %s", a.text)
}

// TestATokenPastTheFactBoundsIsRefused: a signed token whose claim is past the bounds the
// policy's static costs are estimated for (authz.MaxFactEntries groups, authz.MaxFactLength bytes
// of a string) is refused as invalid_token naming the claim; nothing reaches the agent.
func TestATokenPastTheFactBoundsIsRefused(t *testing.T) {
	f := newFixture(t)
	groups := make([]any, authz.MaxFactEntries+1)
	for i := range groups {
		groups[i] = fmt.Sprintf("/g%d", i)
	}
	for name, tc := range map[string]struct {
		extra  map[string]any
		reason string
	}{
		"too many groups": {map[string]any{"groups": groups}, `claim "groups": 513 entries, more than 512`},
		"long sub":        {map[string]any{"sub": strings.Repeat("u", authz.MaxFactLength+1)}, `claim "sub": 1025 bytes, more than 1024`},
		"long actor":      {map[string]any{"act": chain("middle", strings.Repeat("a", authz.MaxFactLength+1))}, `claim "act.sub": 1025 bytes`},
	} {
		t.Run(name, func(t *testing.T) {
			a := f.get("/tasks", f.token(f.valid(tc.extra)), nil)
			assert.Equal(t, http.StatusUnauthorized, a.status, a.text)
			assert.Equal(t, "invalid_token", a.body["error"])
			assert.Contains(t, a.body["error_description"], tc.reason)
			assert.NotContains(t, a.text, "agent: /")
		})
	}
	a := f.get("/tasks", f.token(f.valid(map[string]any{"groups": groups[:authz.MaxFactEntries]})), nil)
	assert.Equal(t, http.StatusOK, a.status, "512 groups are within the bound: %s", a.text)
}

// TestValidatorReadsTheChainAndHonoursItsDepth: a validated token's Request carries the subject
// and the chain, current actor first; Policy.MaxChainDepth lowers the limit.
func TestValidatorReadsTheChainAndHonoursItsDepth(t *testing.T) {
	key := idptest.NewRSAKey(t, "k1")
	jwks := idptest.NewJWKSServer(t, key)
	v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience, MaxChainDepth: 2}}
	ctx := context.Background()
	c, err := v.Validate(ctx, key.Sign(t, idptest.Claims(issuer, audience, time.Minute, map[string]any{"act": chain("middle", "caller")})))
	require.NoError(t, err)
	assert.Equal(t, "user-1", c.Request.Subject)
	assert.Equal(t, []string{"middle", "caller"}, c.Request.Chain)
	assert.Equal(t, "middle", c.Request.Caller)

	_, err = v.Validate(ctx, key.Sign(t, idptest.Claims(issuer, audience, time.Minute, map[string]any{"act": chain("c", "b", "a")})))
	var te *TokenError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, ErrInvalidToken, te.Code)
	assert.Contains(t, te.Description, "more than 2 actors")
}
