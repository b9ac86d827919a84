package authz

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func claims(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

func TestFromClaimsReadsTheChainCurrentActorFirst(t *testing.T) {
	r, err := FromClaims(claims(t, `{"sub":"alice","aud":"spiffe://td/ns/callee","azp":"ns/middle",
		"act":{"sub":"spiffe://td/ns/middle","act":{"sub":"spiffe://td/ns/caller"}}}`), []string{"read"}, 0)
	require.NoError(t, err)
	assert.Equal(t, "alice", r.Subject)
	assert.Equal(t, "spiffe://td/ns/middle", r.Caller, "the current actor, not azp")
	assert.Equal(t, []string{"spiffe://td/ns/middle", "spiffe://td/ns/caller"}, r.Chain)
	assert.Equal(t, []string{"spiffe://td/ns/callee"}, r.Audience)
	assert.Equal(t, []string{"read"}, r.Scopes)
}

func TestFromClaimsWithoutActNamesTheClient(t *testing.T) {
	r, err := FromClaims(claims(t, `{"sub":"alice","aud":["a","b"],"azp":"ns/caller-azp","client_id":"ns/caller"}`), nil, 0)
	require.NoError(t, err)
	assert.Equal(t, "ns/caller", r.Caller, "client_id before azp")
	assert.Empty(t, r.Chain)
	assert.Equal(t, []string{"a", "b"}, r.Audience)

	r, err = FromClaims(claims(t, `{"sub":"alice","azp":"ns/caller"}`), nil, 0)
	require.NoError(t, err)
	assert.Equal(t, "ns/caller", r.Caller)
}

func TestFromClaimsRefusesAMalformedOrTooDeepChain(t *testing.T) {
	for name, tc := range map[string]struct {
		payload string
		depth   int
		reason  string
	}{
		"act not an object": {`{"sub":"u","act":"spiffe://td/x"}`, 0, "act at depth 1 is not an object"},
		"act without sub":   {`{"sub":"u","act":{"client_id":"x"}}`, 0, "act at depth 1 has no sub"},
		"inner act empty":   {`{"sub":"u","act":{"sub":"a","act":{"sub":""}}}`, 0, "act at depth 2 has no sub"},
		"past the depth":    {`{"sub":"u","act":{"sub":"a","act":{"sub":"b","act":{"sub":"c"}}}}`, 2, "more than 2 actors"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromClaims(claims(t, tc.payload), nil, tc.depth)
			var ce *ChainError
			require.True(t, errors.As(err, &ce), "got %v", err)
			assert.Contains(t, ce.Error(), tc.reason)
		})
	}
	_, err := FromClaims(claims(t, `{"sub":"u","act":{"sub":"a","act":{"sub":"b"}}}`), nil, 2)
	assert.NoError(t, err, "a chain at the depth is accepted")
}

func TestFromClaimsReadsGroupsAndKeepsTheClaims(t *testing.T) {
	raw := claims(t, `{"sub":"alice","groups":["/finance",7,"/staff"],"tenant":"acme"}`)
	r, err := FromClaims(raw, nil, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"/finance", "/staff"}, r.Groups, "non-strings are left out")
	assert.Equal(t, "acme", r.Claims["tenant"])

	r, err = FromClaims(claims(t, `{"sub":"alice","groups":"/finance"}`), nil, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"/finance"}, r.Groups, "a single group as a string")
}
