package register

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
)

// Keycloak registers clients through Keycloak's admin REST API (/admin/realms/{realm}/clients).
//
// It authenticates with what the mounted Secret holds: client-id and client-secret (a service
// account with the realm-management role manage-clients; client credentials grant in the target
// realm, or in the realm the optional key "realm" names), or username and password (an admin
// user; password grant with the admin-cli client in realm "master", or "realm").
type Keycloak struct {
	URL   string
	Realm string
	HTTP  *http.Client
	Admin AdminCredentials

	mu      sync.Mutex
	token   string
	expires time.Time
}

// TokenExchangeAttribute turns on Keycloak's standard token exchange (V2, Keycloak 26.2+) for a
// client.
const TokenExchangeAttribute = "standard.token.exchange.enabled"

// clientRepresentation holds the fields of Keycloak's ClientRepresentation this provider sets
// or reads; Keycloak's update applies the fields present and keeps the others.
type clientRepresentation struct {
	ID                        string            `json:"id,omitempty"`
	ClientID                  string            `json:"clientId"`
	Name                      string            `json:"name,omitempty"`
	Description               string            `json:"description,omitempty"`
	Enabled                   *bool             `json:"enabled,omitempty"`
	Protocol                  string            `json:"protocol,omitempty"`
	PublicClient              *bool             `json:"publicClient,omitempty"`
	ClientAuthenticatorType   string            `json:"clientAuthenticatorType,omitempty"`
	ServiceAccountsEnabled    *bool             `json:"serviceAccountsEnabled,omitempty"`
	StandardFlowEnabled       *bool             `json:"standardFlowEnabled,omitempty"`
	ImplicitFlowEnabled       *bool             `json:"implicitFlowEnabled,omitempty"`
	DirectAccessGrantsEnabled *bool             `json:"directAccessGrantsEnabled,omitempty"`
	Attributes                map[string]string `json:"attributes,omitempty"`
}

func desired(c Client) clientRepresentation {
	t, f := true, false
	return clientRepresentation{
		ClientID: c.Name, Name: c.Name, Description: c.Description,
		Enabled: &t, Protocol: "openid-connect", PublicClient: &f, ClientAuthenticatorType: "client-secret",
		// A workload acts on its own (client credentials) and exchanges tokens; it logs no one in.
		ServiceAccountsEnabled: &t, StandardFlowEnabled: &f, ImplicitFlowEnabled: &f, DirectAccessGrantsEnabled: &f,
		Attributes: map[string]string{TokenExchangeAttribute: fmt.Sprint(c.TokenExchange), OwnerAttribute: c.Owner},
	}
}

// differs reports whether have lacks one of want's settings.
func differs(have, want clientRepresentation) bool {
	b := func(p, q *bool) bool { return q != nil && (p == nil || *p != *q) }
	if have.Name != want.Name || have.Description != want.Description || have.Protocol != want.Protocol ||
		have.ClientAuthenticatorType != want.ClientAuthenticatorType ||
		b(have.Enabled, want.Enabled) || b(have.PublicClient, want.PublicClient) ||
		b(have.ServiceAccountsEnabled, want.ServiceAccountsEnabled) || b(have.StandardFlowEnabled, want.StandardFlowEnabled) ||
		b(have.ImplicitFlowEnabled, want.ImplicitFlowEnabled) || b(have.DirectAccessGrantsEnabled, want.DirectAccessGrantsEnabled) {
		return true
	}
	for k, v := range want.Attributes {
		if have.Attributes[k] != v {
			return true
		}
	}
	return false
}

// Register finds the client by clientId, creates it or brings its settings to the desired ones,
// and returns its secret. The secret is read, never regenerated: the replicas of a workload
// share one client. A client found with another owner marker than c.Owner, or none, is neither
// updated nor has its secret read; also when it appeared between the lookup and the creation.
func (k *Keycloak) Register(ctx context.Context, c Client) (Credentials, error) {
	if c.Owner == "" {
		return Credentials{}, errNoOwner
	}
	want := desired(c)
	have, err := k.find(ctx, c.Name)
	if err != nil {
		return Credentials{}, err
	}
	if have == nil {
		status, body, err := k.do(ctx, http.MethodPost, k.admin("clients"), want, nil)
		switch {
		case err != nil:
			return Credentials{}, err
		case status == http.StatusCreated, status == http.StatusConflict: // 409: another replica created it meanwhile
		default:
			return Credentials{}, apiError("creating client", status, body)
		}
		if have, err = k.find(ctx, c.Name); err != nil {
			return Credentials{}, err
		}
		if have == nil {
			return Credentials{}, fmt.Errorf("client %q not found after creating it", c.Name)
		}
	}
	if owner := have.Attributes[OwnerAttribute]; owner != c.Owner {
		return Credentials{}, &ClientOwnedElsewhereError{
			Client: fmt.Sprintf("%q (id %s) in Keycloak realm %s", have.ClientID, have.ID, k.Realm), Owner: owner, Want: c.Owner,
			Adopt: fmt.Sprintf("to let workload %s manage it, set its attribute %s=%s", c.Owner, OwnerAttribute, c.Owner),
		}
	}
	if differs(*have, want) {
		want.ID = have.ID
		status, body, err := k.do(ctx, http.MethodPut, k.admin("clients", have.ID), want, nil)
		if err != nil {
			return Credentials{}, err
		}
		if status != http.StatusNoContent && status != http.StatusOK {
			return Credentials{}, apiError("updating client", status, body)
		}
	}
	var secret struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	status, body, err := k.do(ctx, http.MethodGet, k.admin("clients", have.ID, "client-secret"), nil, &secret)
	if err != nil {
		return Credentials{}, err
	}
	if status != http.StatusOK || secret.Value == "" {
		return Credentials{}, apiError("reading the client secret", status, body)
	}
	return Credentials{ClientID: have.ClientID, ClientSecret: secret.Value}, nil
}

func (k *Keycloak) find(ctx context.Context, clientID string) (*clientRepresentation, error) {
	var found []clientRepresentation
	u := k.admin("clients") + "?" + url.Values{"clientId": {clientID}, "search": {"false"}}.Encode()
	status, body, err := k.do(ctx, http.MethodGet, u, nil, &found)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, apiError("looking up client", status, body)
	}
	for i := range found {
		if found[i].ClientID == clientID {
			return &found[i], nil
		}
	}
	return nil, nil
}

func (k *Keycloak) admin(parts ...string) string {
	p := []string{strings.TrimSuffix(k.URL, "/"), "admin", "realms", url.PathEscape(k.Realm)}
	for _, s := range parts {
		p = append(p, url.PathEscape(s))
	}
	return strings.Join(p, "/")
}

// do sends an admin API request with a bearer token and decodes a 2xx JSON answer into out.
func (k *Keycloak) do(ctx context.Context, method, u string, in, out any) (int, []byte, error) {
	tok, err := k.adminToken(ctx)
	if err != nil {
		return 0, nil, err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := idpclient.Do(k.HTTP, req)
	if err != nil {
		return 0, nil, requestFailed(ctx, "Keycloak at "+k.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		k.mu.Lock()
		k.token = "" // expired or revoked: the next call authenticates again
		k.mu.Unlock()
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, b, fmt.Errorf("%s %s: decoding the answer: %w", method, u, err)
		}
	}
	return resp.StatusCode, b, nil
}

// adminToken returns a token for the admin API, cached until shortly before it expires.
func (k *Keycloak) adminToken(ctx context.Context) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.token != "" && time.Now().Before(k.expires) {
		return k.token, nil
	}
	read := func(key string) string { v, _ := k.Admin.Read(key); return v }
	id, secret, user, pass, realm := read("client-id"), read("client-secret"), read("username"), read("password"), read("realm")
	form := url.Values{}
	switch {
	case id != "" && secret != "":
		form.Set("grant_type", "client_credentials")
		if realm == "" {
			realm = k.Realm
		}
	case user != "" && pass != "":
		form.Set("grant_type", "password")
		form.Set("client_id", "admin-cli")
		form.Set("username", user)
		form.Set("password", pass)
		if realm == "" {
			realm = "master"
		}
	default:
		return "", fmt.Errorf("no Keycloak admin credentials in %s: it needs the keys client-id and client-secret, or username and password (a Secret the injector mounts)", k.Admin.Dir)
	}
	tokenURL := strings.TrimSuffix(k.URL, "/") + "/realms/" + url.PathEscape(realm) + "/protocol/openid-connect/token"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if form.Get("grant_type") == "client_credentials" {
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	}
	resp, err := idpclient.Do(k.HTTP, req)
	if err != nil {
		return "", requestFailed(ctx, "Keycloak at "+k.URL, err)
	}
	defer resp.Body.Close()
	var tr struct {
		AccessToken      string `json:"access_token"`
		ExpiresIn        int64  `json:"expires_in"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tr)
	if resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
		return "", fmt.Errorf("authenticating to Keycloak's admin API at %s: %s %s %s", tokenURL, resp.Status, tr.Error, tr.ErrorDescription)
	}
	k.token = tr.AccessToken
	k.expires = time.Now().Add(time.Duration(tr.ExpiresIn)*time.Second - 10*time.Second)
	return k.token, nil
}

// apiError describes a failed admin API call with Keycloak's own message when it gave one.
func apiError(what string, status int, body []byte) error {
	var e struct {
		Error        string `json:"error"`
		ErrorMessage string `json:"errorMessage"`
	}
	_ = json.Unmarshal(body, &e)
	msg := strings.TrimSpace(e.ErrorMessage + " " + e.Error)
	if msg == "" {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
	}
	if status == http.StatusForbidden {
		msg += " (the admin credentials need the realm-management role manage-clients)"
	}
	return fmt.Errorf("%s: Keycloak answered %d %s", what, status, msg)
}
