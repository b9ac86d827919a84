package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// client is an OAuth client of the provider: configured on the command line, registered through
// RFC 7591, or a SPIFFE workload authenticated by its JWT SVID.
type client struct {
	id       string
	secret   string
	name     string
	audience []string // of the tokens it gets with client credentials; default its own ID
	grants   []oidc.GrantType
	regToken string // RFC 7592 registration access token
	// owner is the registrant's kagenti_owner metadata (kagenti-authbridge's owner marker, its
	// workload's namespace/name), kept and returned as registered metadata.
	owner    string
	lifetime time.Duration
	// mayAct, when set, goes into its client-credentials tokens as may_act (RFC 8693 §4.4): only
	// that party may act for the client in a token exchange.
	mayAct string
	// spiffeID, when set, binds the client to a workload: it authenticates only with a JWT SVID
	// client assertion whose subject is this ID (RFC 7591 token_endpoint_auth_method
	// private_key_jwt, metadata member spiffe_id); its secret is internal and never disclosed.
	spiffeID string
	// assertions counts the token requests it authenticated with a client assertion.
	assertions int
}

func (c *client) GetID() string                        { return c.id }
func (c *client) RedirectURIs() []string               { return nil }
func (c *client) PostLogoutRedirectURIs() []string     { return nil }
func (c *client) ApplicationType() op.ApplicationType  { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod          { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType   { return nil }
func (c *client) GrantTypes() []oidc.GrantType         { return c.grants }
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return c.lifetime }
func (c *client) DevMode() bool                        { return true }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// storage is an in-memory op.Storage with client credentials and token exchange. The
// authorization code flow is not offered: agents authenticate as themselves.
type storage struct {
	key      *rsa.PrivateKey
	keyID    string
	lifetime time.Duration
	// svidSecret is what the JWT SVID middleware passes as the secret of a client it
	// authenticated; nobody else knows it.
	svidSecret string
	// requireAudience makes token exchange refuse a subject token whose audience lacks the
	// requesting client, as Keycloak's standard token exchange does.
	requireAudience bool
	// verifyActor verifies a JWT SVID presented as actor_token and returns its SPIFFE ID; nil
	// when the provider has no SPIFFE trust bundle.
	verifyActor func(token string) (string, error)

	mu      sync.Mutex
	clients map[string]*client
	issued  map[string]issuedToken // by token ID (jti)
}

type issuedToken struct {
	audience []string
	expires  time.Time
}

func newStorage(lifetime time.Duration, requireAudience bool) (*storage, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &storage{key: key, keyID: randomID(8), lifetime: lifetime, svidSecret: randomID(32), requireAudience: requireAudience,
		clients: map[string]*client{}, issued: map[string]issuedToken{}}, nil
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var allGrants = []oidc.GrantType{oidc.GrantTypeClientCredentials, oidc.GrantTypeTokenExchange}

func (s *storage) addClient(c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.lifetime == 0 {
		c.lifetime = s.lifetime
	}
	s.clients[c.id] = c
}

func (s *storage) client(id string) (*client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	if strings.HasPrefix(id, "spiffe://") {
		// A workload authenticated by its JWT SVID (svid.go) is a client by its SPIFFE ID.
		return &client{id: id, secret: s.svidSecret, grants: allGrants, lifetime: s.lifetime}, nil
	}
	return nil, fmt.Errorf("unknown client %q", id)
}

// OPStorage

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	return s.client(id)
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, err := s.client(id)
	if err != nil {
		return err
	}
	if c.secret == "" || c.secret != secret {
		return errors.New("invalid client secret")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return nil
}
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return nil
}

// GetPrivateClaimsFromScopes puts the granted scopes into the access token (RFC 8693 §4.2
// scope), and the client's may_act into its client-credentials tokens (the subject is the client).
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, subject, _ string, scopes []string) (map[string]any, error) {
	claims := map[string]any{}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	if c, err := s.client(subject); err == nil && c.mayAct != "" {
		claims["may_act"] = map[string]any{"sub": c.mayAct}
	}
	if len(claims) == 0 {
		return nil, nil
	}
	return claims, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT profile client keys are not supported")
}
func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

// AuthStorage: tokens and keys.

func (s *storage) CreateAccessToken(_ context.Context, r op.TokenRequest) (string, time.Time, error) {
	id := randomID(16)
	exp := time.Now().Add(s.lifetime)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for k, t := range s.issued {
		if now.After(t.expires) {
			delete(s.issued, k)
		}
	}
	s.issued[id] = issuedToken{audience: slices.Clone(r.GetAudience()), expires: exp}
	return id, exp, nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("refresh tokens are not issued")
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}
func (s *storage) TerminateSession(context.Context, string, string) error { return nil }
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrRequestNotSupported().WithDescription("revocation is not offered")
}
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, errors.New("the authorization code flow is not offered")
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errors.New("no authorization requests")
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errors.New("no authorization requests")
}
func (s *storage) SaveAuthCode(context.Context, string, string) error { return errors.New("no codes") }
func (s *storage) DeleteAuthRequest(context.Context, string) error    { return nil }

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{id: s.keyID, key: s.key}, nil
}
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}
func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{signingKey{id: s.keyID, key: s.key}}}, nil
}

func (s *storage) Health(context.Context) error { return nil }

// Client credentials.

func (s *storage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	if err := s.AuthorizeClientIDSecret(ctx, id, secret); err != nil {
		return nil, err
	}
	return s.client(id)
}

func (s *storage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	c, err := s.client(id)
	if err != nil {
		return nil, err
	}
	aud := c.audience
	if len(aud) == 0 {
		aud = []string{id}
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: aud, Scopes: scopes}, nil
}

// Token exchange (RFC 8693).

func (s *storage) ValidateTokenExchangeRequest(_ context.Context, r op.TokenExchangeRequest) error {
	if r.GetRequestedTokenType() == "" {
		r.SetRequestedTokenType(oidc.AccessTokenType)
	}
	if r.GetRequestedTokenType() != oidc.AccessTokenType {
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are issued")
	}
	if len(r.GetAudience()) == 0 {
		return oidc.ErrInvalidTarget().WithDescription("audience is required")
	}
	if s.requireAudience {
		s.mu.Lock()
		t, ok := s.issued[r.GetExchangeSubjectTokenIDOrToken()]
		s.mu.Unlock()
		if !ok || !slices.Contains(t.audience, r.GetClientID()) {
			return oidc.ErrAccessDenied().WithDescription("client %q is not an audience of the subject token", r.GetClientID())
		}
	}
	actor := actorOf(r)
	if r.GetExchangeActorTokenIDOrToken() != "" && strings.HasPrefix(r.GetClientID(), "spiffe://") && actor != r.GetClientID() {
		// A workload authenticated by its SVID acts as itself: another workload's SVID (a replayed
		// one) does not make it that workload.
		return oidc.ErrInvalidRequest().WithDescription("actor_token names %q, not the authenticated client %q", actor, r.GetClientID())
	}
	claims := r.GetExchangeSubjectTokenClaims()
	if mayAct, ok := claims["may_act"]; ok {
		// RFC 8693 §4.4: only the party the subject token names may act for its subject.
		m, _ := mayAct.(map[string]any)
		if sub, _ := m["sub"].(string); sub != actor {
			return oidc.ErrAccessDenied().WithDescription("the subject token's may_act does not name the actor %q", actor)
		}
	}
	// Constrained delegation: the exchanged token carries at most the subject token's scopes.
	held := strings.Fields(scopeClaim(claims["scope"]))
	for _, sc := range r.GetScopes() {
		if !slices.Contains(held, sc) {
			return oidc.ErrInvalidScope().WithDescription("scope %q is not among the subject token's scopes (%q): scopes only narrow along a delegation chain", sc, strings.Join(held, " "))
		}
	}
	r.SetCurrentScopes(r.GetScopes())
	return nil
}

// actorOf is who acts for the subject: the verified actor token's subject, else the client.
func actorOf(r op.TokenExchangeRequest) string {
	if a := r.GetExchangeActor(); a != "" {
		return a
	}
	return r.GetClientID()
}

// scopeClaim reads a scope claim, a space-separated string (RFC 8693 §4.2) or, as some issuers
// write it, a list.
func scopeClaim(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return strings.Join(out, " ")
	}
	return ""
}

func (s *storage) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	return nil
}

// VerifyExchangeSubjectToken is asked for subject tokens that are not this provider's access
// tokens: none is accepted.
func (s *storage) VerifyExchangeSubjectToken(_ context.Context, _ string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	return "", "", nil, fmt.Errorf("subject tokens of type %s are not accepted", tokenType)
}

// VerifyExchangeActorToken accepts a JWT SVID as actor token (type
// urn:ietf:params:oauth:token-type:jwt), verified against the SPIFFE trust bundle; the actor is
// its SPIFFE ID. (This provider's own access tokens are verified by op before this is asked.)
func (s *storage) VerifyExchangeActorToken(_ context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	if tokenType != oidc.JWTTokenType {
		return "", "", nil, fmt.Errorf("actor tokens of type %s are not accepted", tokenType)
	}
	if s.verifyActor == nil {
		return "", "", nil, errors.New("no SPIFFE trust bundle to verify a JWT SVID actor token")
	}
	id, err := s.verifyActor(token)
	if err != nil {
		return "", "", nil, err
	}
	return token, id, nil, nil
}

// GetPrivateClaimsFromTokenExchangeRequest adds the scopes and the delegation chain: act names
// the actor (RFC 8693 §4.1) and nests the subject token's act, so the token records every hop.
func (s *storage) GetPrivateClaimsFromTokenExchangeRequest(ctx context.Context, r op.TokenExchangeRequest) (map[string]any, error) {
	claims := map[string]any{}
	if len(r.GetScopes()) > 0 {
		claims["scope"] = strings.Join(r.GetScopes(), " ")
	}
	act := map[string]any{"sub": actorOf(r)}
	if prior, ok := r.GetExchangeSubjectTokenClaims()["act"]; ok && prior != nil {
		act["act"] = prior
	}
	claims["act"] = act
	return claims, nil
}

func (s *storage) SetUserinfoFromTokenExchangeRequest(context.Context, *oidc.UserInfo, op.TokenExchangeRequest) error {
	return nil
}
