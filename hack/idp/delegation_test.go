package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

const (
	tokenTypeJWT    = "urn:ietf:params:oauth:token-type:jwt"
	tokenTypeAccess = "urn:ietf:params:oauth:token-type:access_token"
)

// delegationIdP is the dev IdP in process, with a SPIFFE trust bundle whose JWT authority the
// test holds, and the clients user, caller, middle and callee.
type delegationIdP struct {
	url     string
	svidKey *ecdsa.PrivateKey
	s       *storage
}

// registrarID is the SPIFFE ID the in-process IdP lets register clients.
const registrarID = "spiffe://example.org/ns/kagenti-system/sa/kagenti-tokenexchange"

func newDelegationIdP(t *testing.T, mayAct map[string]string) *delegationIdP {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	td := spiffeid.RequireTrustDomainFromString("example.org")
	b := spiffebundle.New(td)
	if err := b.AddJWTAuthority("k1", key.Public()); err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "bundle.json")
	if err := os.WriteFile(bundle, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	s, err := newStorage(time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	// Each client-credentials token is for the next hop: user → caller → middle → callee.
	for _, c := range []*client{
		{id: "user", secret: "user-secret", audience: []string{"caller", "spiffe://example.org/ns/a/sa/caller"}},
		{id: "caller", secret: "caller-secret", audience: []string{"caller"}},
		{id: "middle", secret: "middle-secret"},
		{id: "callee", secret: "callee-secret"},
	} {
		c.name, c.grants, c.mayAct = c.id, allGrants, mayAct[c.id]
		s.addClient(c)
	}
	h, err := newHandler(issuer, s, bundle, td.String(), "", []string{registrarID})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &delegationIdP{url: issuer, svidKey: key, s: s}
}

// svid signs a JWT SVID for id with key (the bundle's authority, or another).
func (p *delegationIdP) svid(t *testing.T, key *ecdsa.PrivateKey, id string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: id, Audience: jwt.Audience{p.url},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour)), IssuedAt: jwt.NewNumericDate(time.Now())}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// token posts form to the token endpoint, authenticated as id:secret (or by form's assertion when
// secret is empty), and returns the status and the answer.
func (p *delegationIdP) token(t *testing.T, id, secret string, form url.Values) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.url+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if secret != "" {
		req.SetBasicAuth(id, secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func (p *delegationIdP) userToken(t *testing.T, scope string) string {
	t.Helper()
	code, out := p.token(t, "user", "user-secret", url.Values{"grant_type": {"client_credentials"}, "scope": {scope}})
	if code != http.StatusOK {
		t.Fatalf("client credentials for user: %d %v", code, out)
	}
	return out["access_token"].(string)
}

func exchangeForm(subject, audience, scope string, extra ...string) url.Values {
	f := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token": {subject}, "subject_token_type": {tokenTypeAccess}, "audience": {audience}}
	if scope != "" {
		f.Set("scope", scope)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		f.Set(extra[i], extra[i+1])
	}
	return f
}

// exchange runs one hop and fails the test unless the IdP issues a token.
func (p *delegationIdP) exchange(t *testing.T, client string, form url.Values) string {
	t.Helper()
	code, out := p.token(t, client, client+"-secret", form)
	if code != http.StatusOK {
		t.Fatalf("exchange by %s: %d %v", client, code, out)
	}
	return out["access_token"].(string)
}

func payload(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %q", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestExchangeNestsTheSubjectTokensAct: user → caller → middle → callee. Each hop's token has the
// user as sub, and act names the hop's actor with the previous chain nested inside (RFC 8693
// §4.1): the callee's token says middle acts, for caller, for the user.
func TestExchangeNestsTheSubjectTokensAct(t *testing.T) {
	idp := newDelegationIdP(t, nil)
	user := idp.userToken(t, "agent:invoke")
	toMiddle := idp.exchange(t, "caller", exchangeForm(user, "middle", "agent:invoke"))
	toCallee := idp.exchange(t, "middle", exchangeForm(toMiddle, "callee", "agent:invoke"))

	c := payload(t, toMiddle)
	if c["sub"] != "user" || mustJSON(c["act"]) != `{"sub":"caller"}` {
		t.Errorf("caller's hop: sub %v act %s, want user and {sub: caller}", c["sub"], mustJSON(c["act"]))
	}
	c = payload(t, toCallee)
	if c["sub"] != "user" || mustJSON(c["act"]) != `{"act":{"sub":"caller"},"sub":"middle"}` {
		t.Errorf("middle's hop: sub %v act %s, want user and {sub: middle, act: {sub: caller}}", c["sub"], mustJSON(c["act"]))
	}
	if c["scope"] != "agent:invoke" {
		t.Errorf("scope %v, want agent:invoke", c["scope"])
	}
}

// TestExchangeWithSVIDActorTokenNamesTheWorkload: an actor token that is a JWT SVID verified
// against the trust bundle makes its SPIFFE ID the actor, nested like any other hop.
func TestExchangeWithSVIDActorTokenNamesTheWorkload(t *testing.T) {
	idp := newDelegationIdP(t, nil)
	user := idp.userToken(t, "agent:invoke")
	callerID, middleID := "spiffe://example.org/ns/a/sa/caller", "spiffe://example.org/ns/a/sa/middle"
	toMiddle := idp.exchange(t, "caller", exchangeForm(user, "middle", "",
		"actor_token", idp.svid(t, idp.svidKey, callerID), "actor_token_type", tokenTypeJWT))
	toCallee := idp.exchange(t, "middle", exchangeForm(toMiddle, "callee", "",
		"actor_token", idp.svid(t, idp.svidKey, middleID), "actor_token_type", tokenTypeJWT))
	want := mustJSON(map[string]any{"sub": middleID, "act": map[string]any{"sub": callerID}})
	if got := mustJSON(payload(t, toCallee)["act"]); got != want {
		t.Errorf("act = %s, want %s", got, want)
	}
}

// TestExchangeRefusesAnActorTokenNotSignedByTheTrustDomain: a JWT SVID signed by another key (a
// plausible SPIFFE ID, the right kid) is refused with invalid_request, as is an actor token of a
// type the IdP does not verify.
func TestExchangeRefusesAnActorTokenNotSignedByTheTrustDomain(t *testing.T) {
	idp := newDelegationIdP(t, nil)
	user := idp.userToken(t, "agent:invoke")
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, extra := range map[string][]string{
		"foreign key":  {"actor_token", idp.svid(t, other, "spiffe://example.org/ns/a/sa/caller"), "actor_token_type", tokenTypeJWT},
		"garbage":      {"actor_token", "not-a-jwt", "actor_token_type", tokenTypeJWT},
		"unknown type": {"actor_token", idp.svid(t, idp.svidKey, "spiffe://example.org/ns/a/sa/caller"), "actor_token_type", "urn:ietf:params:oauth:token-type:saml2"},
	} {
		code, out := idp.token(t, "caller", "caller-secret", exchangeForm(user, "middle", "", extra...))
		if code != http.StatusBadRequest || out["error"] != "invalid_request" {
			t.Errorf("%s: %d %v, want 400 invalid_request", name, code, out)
		}
	}
}

// TestExchangeRefusesAnotherWorkloadsSVIDAsActor: a workload authenticated by its own SVID
// cannot name another workload as actor (a replayed SVID).
func TestExchangeRefusesAnotherWorkloadsSVIDAsActor(t *testing.T) {
	idp := newDelegationIdP(t, nil)
	callerID := "spiffe://example.org/ns/a/sa/caller"
	form := exchangeForm(idp.userToken(t, "agent:invoke"), "middle", "",
		"client_assertion_type", assertionTypeJWT, "client_assertion", idp.svid(t, idp.svidKey, callerID),
		"actor_token", idp.svid(t, idp.svidKey, "spiffe://example.org/ns/a/sa/someone-else"), "actor_token_type", tokenTypeJWT)
	code, out := idp.token(t, callerID, "", form)
	if code != http.StatusBadRequest || out["error"] != "invalid_request" || !strings.Contains(out["error_description"].(string), "not the authenticated client") {
		t.Errorf("another workload's SVID as actor token: %d %v, want 400 invalid_request", code, out)
	}
	// Its own SVID as actor token is accepted.
	form.Set("actor_token", idp.svid(t, idp.svidKey, callerID))
	form.Set("client_assertion", idp.svid(t, idp.svidKey, callerID))
	if code, out := idp.token(t, callerID, "", form); code != http.StatusOK {
		t.Errorf("its own SVID as actor token: %d %v", code, out)
	}
}

// TestExchangeRefusesScopesBeyondTheSubjectTokens: constrained delegation at the issuer — a hop
// may ask for the subject token's scopes or fewer, never more (invalid_scope), and a later hop
// cannot regain what an earlier one dropped.
func TestExchangeRefusesScopesBeyondTheSubjectTokens(t *testing.T) {
	idp := newDelegationIdP(t, nil)
	user := idp.userToken(t, "agent:invoke tasks:read")
	code, out := idp.token(t, "caller", "caller-secret", exchangeForm(user, "middle", "agent:invoke admin"))
	if code != http.StatusBadRequest || out["error"] != "invalid_scope" || !strings.Contains(out["error_description"].(string), `"admin"`) {
		t.Errorf("escalation to admin: %d %v, want 400 invalid_scope naming admin", code, out)
	}
	narrowed := idp.exchange(t, "caller", exchangeForm(user, "middle", "agent:invoke"))
	code, out = idp.token(t, "middle", "middle-secret", exchangeForm(narrowed, "callee", "tasks:read"))
	if code != http.StatusBadRequest || out["error"] != "invalid_scope" {
		t.Errorf("regaining a dropped scope: %d %v, want 400 invalid_scope", code, out)
	}
}

// TestExchangeHonoursMayAct: a subject token with may_act may be exchanged only by the party it
// names (RFC 8693 §4.4).
func TestExchangeHonoursMayAct(t *testing.T) {
	idp := newDelegationIdP(t, map[string]string{"user": "caller"})
	user := idp.userToken(t, "agent:invoke")
	if got := mustJSON(payload(t, user)["may_act"]); got != `{"sub":"caller"}` {
		t.Fatalf("user token may_act = %s", got)
	}
	idp.exchange(t, "caller", exchangeForm(user, "middle", ""))

	// The SVID of another workload as actor: the named party is caller, not it.
	code, out := idp.token(t, "caller", "caller-secret", exchangeForm(user, "middle", "",
		"actor_token", idp.svid(t, idp.svidKey, "spiffe://example.org/ns/a/sa/intruder"), "actor_token_type", tokenTypeJWT))
	if code != http.StatusBadRequest || out["error"] != "access_denied" || !strings.Contains(out["error_description"].(string), "may_act") {
		t.Errorf("may_act mismatch: %d %v, want 400 access_denied naming may_act", code, out)
	}
}
