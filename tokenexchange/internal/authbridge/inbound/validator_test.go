package inbound

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

func TestAcceptedTokensAreCachedBriefly(t *testing.T) {
	key := idptest.NewRSAKey(t, "k1")
	jwks := idptest.NewJWKSServer(t, key)
	now := time.Now()
	v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience},
		Now: func() time.Time { return now }}
	ctx := context.Background()
	tok := key.Sign(t, idptest.Claims(issuer, audience, 10*time.Minute, nil))
	_, err := v.Validate(ctx, tok)
	require.NoError(t, err)

	// The key leaves the JWKS (revoked) and the key set is refreshed: the cached acceptance
	// holds for CacheTTL at most.
	jwks.SetKeys(idptest.NewRSAKey(t, "k2"))
	v.Keys.now = func() time.Time { return now }
	require.NoError(t, v.Keys.Refresh(ctx))
	_, err = v.Validate(ctx, tok)
	assert.NoError(t, err, "within CacheTTL the token is not verified again")
	now = now.Add(CacheTTL + time.Second)
	_, err = v.Validate(ctx, tok)
	assert.ErrorContains(t, err, `signed by unknown key "k1"`, "after CacheTTL it is verified again")
}

func TestCachedTokenStillExpires(t *testing.T) {
	key := idptest.NewRSAKey(t, "k1")
	jwks := idptest.NewJWKSServer(t, key)
	now := time.Now()
	v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience},
		Now: func() time.Time { return now }}
	tok := key.Sign(t, idptest.Claims(issuer, audience, 20*time.Second, nil))
	_, err := v.Validate(context.Background(), tok)
	require.NoError(t, err)
	now = now.Add(20*time.Second + Leeway + time.Second)
	_, err = v.Validate(context.Background(), tok)
	assert.ErrorContains(t, err, "token expired at")
}
