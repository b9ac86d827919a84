package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRegistrationKeepsTheOwnerMarker: the owner marker kagenti-authbridge sends as the metadata
// member kagenti_owner is kept and returned with the client, on registration and on update, so
// that the identity test bed and the e2e exercise the authbridge's owner check.
func TestRegistrationKeepsTheOwnerMarker(t *testing.T) {
	s, err := newStorage(time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&registrationHandler{s: s, issuer: "http://idp.test"})
	defer srv.Close()
	send := func(method, url, bearer, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
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
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %v", method, url, resp.StatusCode, out)
		}
		return out
	}
	reg := send(http.MethodPost, srv.URL+"/register", "",
		`{"client_name":"agents/weather","grant_types":["client_credentials"],"kagenti_owner":"agents/weather"}`)
	if reg["kagenti_owner"] != "agents/weather" {
		t.Errorf("registration answer: kagenti_owner = %v, want agents/weather", reg["kagenti_owner"])
	}
	id := reg["client_id"].(string)
	upd := send(http.MethodPut, srv.URL+"/register/"+id, reg["registration_access_token"].(string),
		`{"client_id":"`+id+`","client_name":"agents/weather-v2","grant_types":["client_credentials"],"kagenti_owner":"agents/weather"}`)
	if upd["kagenti_owner"] != "agents/weather" {
		t.Errorf("update answer: kagenti_owner = %v, want agents/weather", upd["kagenti_owner"])
	}
	c, err := s.client(id)
	if err != nil || c.owner != "agents/weather" {
		t.Errorf("stored client: owner %q (%v)", c.owner, err)
	}

	// A registrant that sends none gets none back (the member is the registrant's, not ours).
	if other := send(http.MethodPost, srv.URL+"/register", "", `{"client_name":"x","grant_types":["client_credentials"]}`); other["kagenti_owner"] != nil {
		t.Errorf("kagenti_owner = %v for a client registered without one", other["kagenti_owner"])
	}
}
