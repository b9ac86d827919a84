// Package inbound is the auth-proxy role: a reverse proxy in front of the agent that admits a
// request only with a valid bearer JWT from the workload's identity provider.
package inbound

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/kagenti/platform/pkg/configmap/authz"
)

// SignatureAlgorithms are the JWS algorithms a token may be signed with: asymmetric only. "none"
// and the HMAC algorithms (whose key would be public here) are refused by the parser.
var SignatureAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// Leeway is the clock skew tolerated on exp, nbf and iat.
const Leeway = 30 * time.Second

// maxTokenSize bounds a bearer token; larger headers are refused before parsing.
const maxTokenSize = 16 << 10

// Error codes of RFC 6750 §3.1.
const (
	ErrInvalidRequest    = "invalid_request"
	ErrInvalidToken      = "invalid_token"
	ErrInsufficientScope = "insufficient_scope"
)

// TokenError is why a token is refused, in RFC 6750 terms.
type TokenError struct {
	Code        string
	Description string
}

func (e *TokenError) Error() string { return e.Code + ": " + e.Description }

func invalid(format string, args ...any) *TokenError {
	return &TokenError{Code: ErrInvalidToken, Description: fmt.Sprintf(format, args...)}
}

// Policy is what a valid token must satisfy.
type Policy struct {
	Issuer         string
	Audience       string
	RequiredScopes []string
	// MaxChainDepth bounds the token's delegation chain (nested act claims);
	// authz.DefaultMaxChainDepth when not positive.
	MaxChainDepth int
}

// Validator checks bearer JWTs: signature by a key of the KeySet, issuer, expiry, audience and
// scopes. A token it accepted is remembered for up to CacheTTL (never past its expiry), so that a
// caller reusing its token costs one signature verification, not one per request; the cache
// belongs to this Validator, which is replaced with any change of the policy or the JWKS URL.
type Validator struct {
	Keys   *KeySet
	Policy Policy
	Now    func() time.Time

	cache validated
}

// CacheTTL bounds how long an accepted token is trusted without verifying it again (a key removed
// from the JWKS stops admitting its tokens within this time).
const CacheTTL = time.Minute

// maxCached bounds the cache of accepted tokens.
const maxCached = 4096

type validated struct {
	mu      sync.Mutex
	entries map[[32]byte]validEntry
}

type validEntry struct {
	claims *Claims
	until  time.Time
}

func (c *validated) get(key [32]byte, now time.Time) *Claims {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && now.Before(e.until) {
		return e.claims
	}
	return nil
}

func (c *validated) put(key [32]byte, claims *Claims, until time.Time, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[32]byte]validEntry{}
	}
	if len(c.entries) >= maxCached {
		for k, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCached {
			clear(c.entries) // all live: start over rather than track recency
		}
	}
	c.entries[key] = validEntry{claims: claims, until: until}
}

// Claims are a validated token's claims: the registered ones and the raw payload.
type Claims struct {
	jwt.Claims
	Scopes []string
	Raw    map[string]any
	// Request is the token's part of an authorization request: subject, caller and the
	// delegation chain read from the verified payload.
	Request *authz.Request
}

// Validate returns the token's claims, or a *TokenError saying why it is refused.
func (v *Validator) Validate(ctx context.Context, token string) (*Claims, error) {
	if len(token) > maxTokenSize {
		return nil, invalid("token exceeds %d bytes", maxTokenSize)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	key := sha256.Sum256([]byte(token))
	if c := v.cache.get(key, now()); c != nil {
		return c, nil
	}
	c, err := v.verify(ctx, token, now)
	if err != nil {
		return nil, err
	}
	until := now().Add(CacheTTL)
	if exp := c.Expiry.Time(); exp.Before(until) {
		until = exp
	}
	v.cache.put(key, c, until, now())
	return c, nil
}

// verify checks the token fully.
func (v *Validator) verify(ctx context.Context, token string, now func() time.Time) (*Claims, error) {
	tok, err := jwt.ParseSigned(token, SignatureAlgorithms)
	if err != nil {
		return nil, invalid("malformed or unsupported token: %s", describeParseError(token, err))
	}
	if len(tok.Headers) != 1 {
		return nil, invalid("token must carry exactly one signature")
	}
	key, err := v.Keys.Key(ctx, tok.Headers[0].KeyID)
	if err != nil {
		return nil, invalid("%v", err)
	}
	var c Claims
	if err := tok.Claims(key, &c.Claims, &c.Raw); err != nil {
		return nil, invalid("signature verification failed")
	}
	if c.Expiry == nil {
		return nil, invalid("token has no expiry (exp)")
	}
	err = c.Claims.ValidateWithLeeway(jwt.Expected{Issuer: v.Policy.Issuer, AnyAudience: jwt.Audience{v.Policy.Audience}, Time: now()}, Leeway)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return nil, invalid("token expired at %s", c.Expiry.Time().UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, invalid("token is not valid yet")
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return nil, invalid("issuer %q is not the expected %q", c.Issuer, v.Policy.Issuer)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return nil, invalid("audience %v does not include %q", []string(c.Audience), v.Policy.Audience)
	default:
		return nil, invalid("%v", err)
	}
	c.Scopes = scopes(c.Raw)
	var missing []string
	for _, s := range v.Policy.RequiredScopes {
		if !slices.Contains(c.Scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return nil, &TokenError{Code: ErrInsufficientScope, Description: "missing scope(s) " + strings.Join(missing, " ")}
	}
	// The act chain is inside the signed payload: only the issuer added its hops. A chain that is
	// malformed or deeper than the limit is refused as a bad token.
	if c.Request, err = authz.FromClaims(c.Raw, c.Scopes, v.Policy.MaxChainDepth); err != nil {
		return nil, invalid("%v", err)
	}
	return &c, nil
}

// scopes reads the OAuth scope claim (RFC 8693 §4.2, a space-separated string) or, as some
// providers issue it, scp (a string or a list).
func scopes(raw map[string]any) []string {
	for _, claim := range []string{"scope", "scp"} {
		switch v := raw[claim].(type) {
		case string:
			return strings.Fields(v)
		case []any:
			out := make([]string, 0, len(v))
			for _, s := range v {
				if str, ok := s.(string); ok {
					out = append(out, str)
				}
			}
			return out
		}
	}
	return nil
}

// describeParseError names the problem plainly, in particular an unsigned ("alg": "none") token,
// which go-jose reports as an unsupported algorithm.
func describeParseError(token string, err error) string {
	if hdr, _, ok := strings.Cut(token, "."); ok {
		var h struct {
			Alg string `json:"alg"`
		}
		if b, derr := base64.RawURLEncoding.DecodeString(hdr); derr == nil && json.Unmarshal(b, &h) == nil && h.Alg != "" {
			if strings.EqualFold(h.Alg, "none") {
				return `unsigned token ("alg": "none")`
			}
			if !slices.Contains(SignatureAlgorithms, jose.SignatureAlgorithm(h.Alg)) {
				return fmt.Sprintf("algorithm %q is not accepted", h.Alg)
			}
		}
	}
	return err.Error()
}
