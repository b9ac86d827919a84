// Package idptest is a test double of an identity provider for the authbridge roles' tests: it
// signs tokens with keys it publishes as a JWKS, and records token-endpoint requests. The
// integration tests use the real OIDC provider of hack/idp instead.
package idptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Key is a signing key with its key ID.
type Key struct {
	ID     string
	Alg    jose.SignatureAlgorithm
	Signer any // *rsa.PrivateKey or *ecdsa.PrivateKey
}

// NewRSAKey returns a 2048-bit RS256 key.
func NewRSAKey(t testing.TB, id string) Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: id, Alg: jose.RS256, Signer: k}
}

// NewECKey returns a P-256 ES256 key.
func NewECKey(t testing.TB, id string) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: id, Alg: jose.ES256, Signer: k}
}

// Public returns the key's public JWK.
func (k Key) Public() jose.JSONWebKey {
	var pub any
	switch s := k.Signer.(type) {
	case *rsa.PrivateKey:
		pub = &s.PublicKey
	case *ecdsa.PrivateKey:
		pub = &s.PublicKey
	}
	return jose.JSONWebKey{Key: pub, KeyID: k.ID, Algorithm: string(k.Alg), Use: "sig"}
}

// Sign returns a compact JWS of claims signed with k.
func (k Key) Sign(t testing.TB, claims any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.Alg, Key: jose.JSONWebKey{Key: k.Signer, KeyID: k.ID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Claims returns typical access token claims valid for ttl.
func Claims(issuer, audience string, ttl time.Duration, extra map[string]any) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": issuer, "aud": audience, "sub": "user-1", "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(),
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// JWKSServer publishes a JWKS whose keys the test can change.
type JWKSServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []Key
	down    bool
	fetches int
	hole    chan struct{} // while set, requests are accepted and never answered
	arrived chan struct{} // receives a value for every request held in the hole
}

// NewJWKSServer serves keys at /certs.
func NewJWKSServer(t testing.TB, keys ...Key) *JWKSServer {
	s := &JWKSServer{keys: keys, arrived: make(chan struct{}, 1024)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.fetches++
		if hole := s.hole; hole != nil {
			s.mu.Unlock()
			s.arrived <- struct{}{}
			select {
			case <-hole:
			case <-r.Context().Done():
			}
			panic(http.ErrAbortHandler) // the connection closes without an answer
		}
		defer s.mu.Unlock()
		if s.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		set := jose.JSONWebKeySet{}
		for _, k := range s.keys {
			set.Keys = append(set.Keys, k.Public())
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(func() { s.SetBlackHole(false); s.Close() })
	return s
}

// SetBlackHole makes the JWKS endpoint accept requests and never answer them (a provider behind
// a black-holed route), or releases the requests it holds.
func (s *JWKSServer) SetBlackHole(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case on && s.hole == nil:
		s.hole = make(chan struct{})
	case !on && s.hole != nil:
		close(s.hole)
		s.hole = nil
	}
}

// Held returns a channel that receives a value for every request the black hole took.
func (s *JWKSServer) Held() <-chan struct{} { return s.arrived }

// URL of the JWKS.
func (s *JWKSServer) URL() string { return s.Server.URL + "/certs" }

// SetKeys replaces the published keys (a rotation).
func (s *JWKSServer) SetKeys(keys ...Key) { s.mu.Lock(); s.keys = keys; s.mu.Unlock() }

// SetDown makes the JWKS endpoint fail.
func (s *JWKSServer) SetDown(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

// Fetches counts JWKS requests.
func (s *JWKSServer) Fetches() int { s.mu.Lock(); defer s.mu.Unlock(); return s.fetches }

// String describes the server for messages.
func (s *JWKSServer) String() string { return fmt.Sprintf("JWKS at %s", s.URL()) }

// Trap is a second host that must never be reached: it records every request that arrives.
type Trap struct {
	*httptest.Server
	mu   sync.Mutex
	hits []string
}

// NewTrap starts a Trap.
func NewTrap(t testing.TB) *Trap {
	tr := &Trap{}
	tr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tr.mu.Lock()
		tr.hits = append(tr.hits, fmt.Sprintf("%s %s Authorization=%q body=%q", r.Method, r.URL, r.Header.Get("Authorization"), body))
		tr.mu.Unlock()
		_, _ = io.WriteString(w, `{"access_token":"from-the-trap","expires_in":300,"keys":[]}`)
	}))
	t.Cleanup(tr.Close)
	return tr
}

// Hits lists the requests that reached the trap.
func (tr *Trap) Hits() []string { tr.mu.Lock(); defer tr.mu.Unlock(); return slices.Clone(tr.hits) }

// NewRedirector starts a server that answers every request with status (a 3xx) and a Location
// of to plus the request's path.
func NewRedirector(t testing.TB, status int, to string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, to+r.URL.Path, status)
	}))
	t.Cleanup(s.Close)
	return s
}
