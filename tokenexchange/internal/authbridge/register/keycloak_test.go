package register

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// keycloak is a double of Keycloak's admin REST API that answers with the recorded shapes of
// testdata/keycloak and records every request.
type keycloak struct {
	*httptest.Server
	t         *testing.T
	realm     string
	mu        sync.Mutex
	clients   map[string]map[string]any // by id: full ClientRepresentation as stored
	requests  []string                  // "METHOD path?query"
	bodies    map[string][]byte         // last body per "METHOD path"
	forbidden bool
	racing    bool // the next create loses a race: 409, with the client existing
	// racingOwner, when set, is the owner marker of the client that wins the race.
	racingOwner string
}

func recorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "keycloak", name))
	require.NoError(t, err)
	return b
}

func newKeycloak(t *testing.T, realm string) *keycloak {
	k := &keycloak{t: t, realm: realm, clients: map[string]map[string]any{}, bodies: map[string][]byte{}}
	k.Server = httptest.NewServer(http.HandlerFunc(k.serve))
	t.Cleanup(k.Close)
	return k
}

func (k *keycloak) serve(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	k.requests = append(k.requests, r.Method+" "+r.URL.RequestURI())
	k.bodies[r.Method+" "+r.URL.Path] = body
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(r.URL.Path, "/protocol/openid-connect/token") {
		form, _ := url.ParseQuery(string(body))
		id, secret, _ := r.BasicAuth()
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		ok := (form.Get("grant_type") == "client_credentials" && id == "kagenti-registrar" && secret == "registrar-secret") ||
			(form.Get("grant_type") == "password" && form.Get("client_id") == "admin-cli" && form.Get("username") == "admin" && form.Get("password") == "admin-pw")
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write(recorded(k.t, "unauthorized.json"))
			return
		}
		_, _ = w.Write(recorded(k.t, "token.json"))
		return
	}
	prefix := "/admin/realms/" + k.realm + "/clients"
	if !strings.HasPrefix(r.URL.Path, prefix) || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer eyJ") {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"HTTP 401 Unauthorized"}`))
		return
	}
	if k.forbidden {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write(recorded(k.t, "forbidden.json"))
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, prefix)
	switch {
	case r.Method == http.MethodGet && rest == "":
		out := []map[string]any{}
		for _, c := range k.clients {
			if c["clientId"] == r.URL.Query().Get("clientId") {
				out = append(out, c)
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodPost && rest == "":
		var rep map[string]any
		require.NoError(k.t, json.Unmarshal(body, &rep))
		if k.racing {
			k.racing = false
			k.store("racer-id", rep)
			if k.racingOwner != "" {
				k.clients["racer-id"]["attributes"].(map[string]any)[OwnerAttribute] = k.racingOwner
			}
		}
		for _, c := range k.clients {
			if c["clientId"] == rep["clientId"] {
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write(recorded(k.t, "conflict.json"))
				return
			}
		}
		id := fmt.Sprintf("id-%d", len(k.clients)+1)
		k.store(id, rep)
		w.Header().Set("Location", k.URL+prefix+"/"+id)
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodPut && !strings.Contains(rest[1:], "/"):
		c, ok := k.clients[rest[1:]]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		var rep map[string]any
		require.NoError(k.t, json.Unmarshal(body, &rep))
		for f, v := range rep { // Keycloak's update: fields present are set, attributes merged
			if f == "attributes" {
				for ak, av := range v.(map[string]any) {
					c["attributes"].(map[string]any)[ak] = av
				}
				continue
			}
			c[f] = v
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && strings.HasSuffix(rest, "/client-secret"):
		_, _ = w.Write(recorded(k.t, "client-secret.json"))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"Could not find client"}`))
	}
}

// store keeps rep laid over the recorded full representation, as Keycloak fills in defaults.
func (k *keycloak) store(id string, rep map[string]any) {
	var full map[string]any
	require.NoError(k.t, json.Unmarshal(recorded(k.t, "client.json"), &full))
	full["attributes"] = map[string]any{"realm_client": "false", "client.secret.creation.time": "1764115200"}
	for f, v := range rep {
		if f == "attributes" {
			for ak, av := range v.(map[string]any) {
				full["attributes"].(map[string]any)[ak] = av
			}
			continue
		}
		full[f] = v
	}
	full["id"] = id
	k.clients[id] = full
}

func (k *keycloak) Requests() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.requests...)
}

func adminDir(t *testing.T, kv map[string]string) AdminCredentials {
	dir := t.TempDir()
	for key, v := range kv {
		require.NoError(t, os.WriteFile(filepath.Join(dir, key), []byte(v+"\n"), 0o600))
	}
	return AdminCredentials{Dir: dir}
}

var serviceAccount = map[string]string{"client-id": "kagenti-registrar", "client-secret": "registrar-secret"}

func TestKeycloakCreatesTheClient(t *testing.T) {
	kc := newKeycloak(t, "agents")
	p := &Keycloak{URL: kc.URL + "/", Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	creds, err := p.Register(context.Background(), Client{Name: "agents/weather-agent", Owner: "agents/weather-agent", Description: "d", TokenExchange: true})
	require.NoError(t, err)
	assert.Equal(t, Credentials{ClientID: "agents/weather-agent", ClientSecret: "q8mJ2vX0bN4rT6yW1zK3pL5sD7fG9hA"}, creds)
	assert.Equal(t, []string{
		"POST /realms/agents/protocol/openid-connect/token",
		"GET /admin/realms/agents/clients?clientId=agents%2Fweather-agent&search=false",
		"POST /admin/realms/agents/clients",
		"GET /admin/realms/agents/clients?clientId=agents%2Fweather-agent&search=false",
		"GET /admin/realms/agents/clients/id-1/client-secret",
	}, kc.Requests(), "one admin token for all calls")
	var sent map[string]any
	require.NoError(t, json.Unmarshal(kc.bodies["POST /admin/realms/agents/clients"], &sent))
	assert.Equal(t, map[string]any{
		"clientId": "agents/weather-agent", "name": "agents/weather-agent", "description": "d", "enabled": true,
		"protocol": "openid-connect", "publicClient": false, "clientAuthenticatorType": "client-secret",
		"serviceAccountsEnabled": true, "standardFlowEnabled": false, "implicitFlowEnabled": false, "directAccessGrantsEnabled": false,
		"attributes": map[string]any{"standard.token.exchange.enabled": "true", "kagenti.io/owner": "agents/weather-agent"},
	}, sent)
}

func TestKeycloakIsIdempotent(t *testing.T) {
	kc := newKeycloak(t, "agents")
	p := &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	c := Client{Name: "agents/weather-agent", Owner: "agents/weather-agent", Description: "d", TokenExchange: true}
	_, err := p.Register(context.Background(), c)
	require.NoError(t, err)
	n := len(kc.Requests())
	_, err = p.Register(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"GET /admin/realms/agents/clients?clientId=agents%2Fweather-agent&search=false",
		"GET /admin/realms/agents/clients/id-1/client-secret",
	}, kc.Requests()[n:], "an unchanged client is only read")
	assert.Len(t, kc.clients, 1)

	// A changed setting is an update of the same client; settings this provider does not own stay.
	kc.clients["id-1"]["attributes"].(map[string]any)["post.logout.redirect.uris"] = "+"
	n = len(kc.Requests())
	c.TokenExchange = false
	_, err = p.Register(context.Background(), c)
	require.NoError(t, err)
	assert.Contains(t, kc.Requests()[n:], "PUT /admin/realms/agents/clients/id-1")
	attrs := kc.clients["id-1"]["attributes"].(map[string]any)
	assert.Equal(t, "false", attrs["standard.token.exchange.enabled"])
	assert.Equal(t, "+", attrs["post.logout.redirect.uris"])
	assert.Len(t, kc.clients, 1)
}

func TestKeycloakCreateRace(t *testing.T) {
	kc := newKeycloak(t, "agents")
	kc.racing = true // another replica of the workload creates the same client first
	p := &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	creds, err := p.Register(context.Background(), Client{Name: "agents/weather-agent", Owner: "agents/weather-agent", TokenExchange: true})
	require.NoError(t, err)
	assert.Equal(t, "agents/weather-agent", creds.ClientID)
	assert.Len(t, kc.clients, 1)
}

func TestKeycloakAdminPasswordLogin(t *testing.T) {
	kc := newKeycloak(t, "agents")
	p := &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, map[string]string{"username": "admin", "password": "admin-pw"})}
	_, err := p.Register(context.Background(), Client{Name: "x", Owner: "agents/x"})
	require.NoError(t, err)
	assert.Equal(t, "POST /realms/master/protocol/openid-connect/token", kc.Requests()[0], "an admin user logs in to master with admin-cli")
}

func TestKeycloakErrorsSayWhatToFix(t *testing.T) {
	kc := newKeycloak(t, "agents")
	_, err := (&Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, nil)}).Register(context.Background(), Client{Name: "x", Owner: "agents/x"})
	assert.ErrorContains(t, err, "no Keycloak admin credentials in")
	assert.ErrorContains(t, err, "client-id and client-secret, or username and password")

	_, err = (&Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, map[string]string{"client-id": "kagenti-registrar", "client-secret": "wrong"})}).Register(context.Background(), Client{Name: "x", Owner: "agents/x"})
	assert.ErrorContains(t, err, "401 Unauthorized unauthorized_client Invalid client or Invalid client credentials")

	kc.forbidden = true
	_, err = (&Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}).Register(context.Background(), Client{Name: "x", Owner: "agents/x"})
	assert.ErrorContains(t, err, "Keycloak answered 403 HTTP 403 Forbidden (the admin credentials need the realm-management role manage-clients)")

	// The role stopping (here: its status server could not bind) is not the provider's fault.
	stopped, stop := context.WithCancelCause(context.Background())
	stop(errors.New("status server: listen tcp 127.0.0.1:15124: bind: address already in use"))
	_, err = (&Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}).Register(stopped, Client{Name: "x", Owner: "agents/x"})
	assert.ErrorContains(t, err, "request to Keycloak at "+kc.URL+" abandoned: status server: listen tcp 127.0.0.1:15124: bind: address already in use")
	assert.NotContains(t, err.Error(), "unreachable")

	kc.Close()
	_, err = (&Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}).Register(context.Background(), Client{Name: "x", Owner: "agents/x"})
	assert.ErrorContains(t, err, "unreachable")
}

// clientCopy is a deep copy of a stored client, to show later that nothing of it changed.
func (k *keycloak) clientCopy(t *testing.T, id string) map[string]any {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, err := json.Marshal(k.clients[id])
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(b, &c))
	return c
}

// readsNoSecretAndChangesNothing: none of requests read a client secret or change a client.
func readsNoSecretAndChangesNothing(t *testing.T, requests []string) {
	t.Helper()
	for _, r := range requests {
		assert.NotContains(t, r, "client-secret", "a refused client's secret is never read")
		assert.False(t, strings.HasPrefix(r, "PUT ") || strings.HasPrefix(r, "DELETE "), "a refused client is never changed: %s", r)
	}
}

// TestKeycloakRefusesAnotherNamespacesClient is issue 26's takeover: team-a's TokenExchange sets
// clientNameTemplate to the name of team-b's client. Register finds it by name, sees team-b's
// owner marker, and leaves it alone: no update, no secret read, no credentials for team-a.
func TestKeycloakRefusesAnotherNamespacesClient(t *testing.T) {
	kc := newKeycloak(t, "agents")
	p := &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	teamB := Client{Name: "team-b/agent", Owner: "team-b/agent", Description: "team-b's agent", TokenExchange: true}
	_, err := p.Register(context.Background(), teamB)
	require.NoError(t, err)
	before := kc.clientCopy(t, "id-1")

	n := len(kc.Requests())
	creds, err := p.Register(context.Background(), Client{Name: "team-b/agent", Owner: "team-a/thief", Description: "team-a's", TokenExchange: false})
	var refused *ClientOwnedElsewhereError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, Credentials{}, creds, "team-a gets no credentials")
	assert.Equal(t, "team-b/agent", refused.Owner)
	assert.EqualError(t, err, `client "team-b/agent" (id id-1) in Keycloak realm agents belongs to workload team-b/agent, not to team-a/thief, and is left untouched: choose another clientNameTemplate`)
	readsNoSecretAndChangesNothing(t, kc.Requests()[n:])
	assert.Equal(t, before, kc.clientCopy(t, "id-1"), "team-b's client is unchanged")
	assert.Len(t, kc.clients, 1)
}

// TestKeycloakRefusesAClientWithoutOwnerMarker: a client made by hand (or by an older
// kagenti-authbridge) is not taken over either; the refusal says how to adopt it, and once its
// owner marker is set, register manages it.
func TestKeycloakRefusesAClientWithoutOwnerMarker(t *testing.T) {
	kc := newKeycloak(t, "agents")
	kc.store("by-hand", map[string]any{"clientId": "agents/weather-agent", "description": "made in the admin console"})
	p := &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	c := Client{Name: "agents/weather-agent", Owner: "agents/weather-agent", TokenExchange: true}
	before := kc.clientCopy(t, "by-hand")

	_, err := p.Register(context.Background(), c)
	var refused *ClientOwnedElsewhereError
	require.ErrorAs(t, err, &refused)
	assert.Empty(t, refused.Owner)
	assert.ErrorContains(t, err, `client "agents/weather-agent" (id by-hand) in Keycloak realm agents exists without an owner marker`)
	assert.ErrorContains(t, err, "to let workload agents/weather-agent manage it, set its attribute kagenti.io/owner=agents/weather-agent")
	readsNoSecretAndChangesNothing(t, kc.Requests())
	assert.Equal(t, before, kc.clientCopy(t, "by-hand"))

	// Adoption: a person sets the marker; the next registration brings the client to its settings.
	kc.mu.Lock()
	kc.clients["by-hand"]["attributes"].(map[string]any)[OwnerAttribute] = "agents/weather-agent"
	kc.mu.Unlock()
	creds, err := p.Register(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, "agents/weather-agent", creds.ClientID)
	assert.Equal(t, "true", kc.clientCopy(t, "by-hand")["attributes"].(map[string]any)[TokenExchangeAttribute])
}

// TestKeycloakCreateRaceWithAnotherOwner: the client appears between the lookup and the creation
// (409), created for another workload: it is refused like one found at once.
func TestKeycloakCreateRaceWithAnotherOwner(t *testing.T) {
	kc := newKeycloak(t, "agents")
	kc.racing, kc.racingOwner = true, "agents/other"
	p := &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	_, err := p.Register(context.Background(), Client{Name: "agents/weather-agent", Owner: "agents/weather-agent"})
	var refused *ClientOwnedElsewhereError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, "agents/other", refused.Owner)
	readsNoSecretAndChangesNothing(t, kc.Requests())
}

func TestOwnerMarkerIsNamespaceSlashWorkload(t *testing.T) {
	assert.Equal(t, "team-a/weather", OwnerOf(authconfig.Workload{Namespace: "team-a", Name: "weather", PodName: "weather-0"}))
	// Namespace and workload names are DNS labels (no '/'): two different pairs never meet.
	assert.NotEqual(t, OwnerOf(authconfig.Workload{Namespace: "a-b", Name: "c"}), OwnerOf(authconfig.Workload{Namespace: "a", Name: "b-c"}))
}
