package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// register posts metadata to /register with bearer and returns the status and the answer.
func (p *delegationIdP) register(t *testing.T, bearer, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.url+"/register", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
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

const boundWorkload = "spiffe://example.org/ns/agents/sa/weather"

var boundClientMetadata = `{"client_name":"agents/weather","grant_types":["client_credentials","urn:ietf:params:oauth:grant-type:token-exchange"],` +
	`"token_endpoint_auth_method":"private_key_jwt","spiffe_id":"` + boundWorkload + `","kagenti_owner":"agents/weather"}`

// TestRegistrationNeedsAnAllowedRegistrarsSVID: with --registrar, RFC 7591 registration is
// authenticated by the registrar's JWT SVID; another SPIFFE ID, an SVID not signed by the trust
// domain and garbage are refused with a reason.
func TestRegistrationNeedsAnAllowedRegistrarsSVID(t *testing.T) {
	p := newDelegationIdP(t, nil)
	other := newDelegationIdP(t, nil)
	for name, bearer := range map[string]string{
		"another SPIFFE ID":          p.svid(t, p.svidKey, "spiffe://example.org/ns/agents/sa/weather"),
		"another trust domain's key": p.svid(t, other.svidKey, registrarID),
		"garbage":                    "not-a-jwt",
	} {
		if code, out := p.register(t, bearer, boundClientMetadata); code != http.StatusUnauthorized || out["error"] != "invalid_token" {
			t.Errorf("%s: %d %v, want 401 invalid_token", name, code, out)
		}
	}
	code, out := p.register(t, p.svid(t, p.svidKey, registrarID), boundClientMetadata)
	if code != http.StatusCreated {
		t.Fatalf("registrar's SVID: %d %v", code, out)
	}
	if out["token_endpoint_auth_method"] != "private_key_jwt" || out["spiffe_id"] != boundWorkload {
		t.Errorf("answer %v: want private_key_jwt bound to %s", out, boundWorkload)
	}
	if _, ok := out["client_secret"]; ok {
		t.Errorf("a private_key_jwt client was given a client_secret: %v", out)
	}
}

// TestBoundClientAuthenticatesOnlyWithItsWorkloadsSVID: a private_key_jwt client gets tokens with
// a client assertion whose subject is its bound SPIFFE ID; another workload's SVID and a
// client_secret are refused with invalid_client; the IdP counts the assertions it accepted.
func TestBoundClientAuthenticatesOnlyWithItsWorkloadsSVID(t *testing.T) {
	p := newDelegationIdP(t, nil)
	code, reg := p.register(t, p.svid(t, p.svidKey, registrarID), boundClientMetadata)
	if code != http.StatusCreated {
		t.Fatalf("registration: %d %v", code, reg)
	}
	id := reg["client_id"].(string)
	form := func(assertion string) url.Values {
		return url.Values{"grant_type": {"client_credentials"}, "client_id": {id},
			"client_assertion_type": {assertionTypeJWT}, "client_assertion": {assertion}}
	}
	if code, out := p.token(t, "", "", form(p.svid(t, p.svidKey, "spiffe://example.org/ns/agents/sa/other"))); code != http.StatusUnauthorized || out["error"] != "invalid_client" {
		t.Errorf("another workload's SVID: %d %v, want 401 invalid_client", code, out)
	}
	c, err := p.s.client(id)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := p.token(t, id, c.secret, url.Values{"grant_type": {"client_credentials"}}); code != http.StatusUnauthorized || out["error"] != "invalid_client" {
		t.Errorf("client_secret: %d %v, want 401 invalid_client", code, out)
	}
	code, out := p.token(t, "", "", form(p.svid(t, p.svidKey, boundWorkload)))
	if code != http.StatusOK || out["access_token"] == nil {
		t.Fatalf("bound workload's SVID: %d %v", code, out)
	}
	p.s.mu.Lock()
	n := c.assertions
	p.s.mu.Unlock()
	if n != 1 {
		t.Errorf("assertions counted = %d, want 1", n)
	}
}
