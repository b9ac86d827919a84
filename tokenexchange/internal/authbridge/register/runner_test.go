package register

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar/sidecartest"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// dcr is an RFC 7591/7592 registration endpoint double.
type dcr struct {
	*httptest.Server
	mu       sync.Mutex
	iat      string // required initial access token, if any
	clients  map[string]map[string]any
	requests []string
	down     bool
	// dedupe: a registration with a known client_name gets the existing client back (some
	// providers do), with the owner marker it was registered with.
	dedupe bool
}

func newDCR(t *testing.T) *dcr {
	d := &dcr{clients: map[string]map[string]any{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.requests = append(d.requests, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		if d.down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/register":
			if d.iat != "" && r.Header.Get("Authorization") != "Bearer "+d.iat {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":"invalid_token","error_description":"initial access token required"}`))
				return
			}
			id := fmt.Sprintf("client-%d", len(d.clients)+1)
			for known, c := range d.clients {
				if d.dedupe && c["client_name"] == m["client_name"] {
					id, m = known, c
				}
			}
			d.clients[id] = m
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"client_id": id, "client_secret": "secret-of-" + id, "client_name": m["client_name"],
				"kagenti_owner": m["kagenti_owner"], "registration_access_token": "rat-" + id, "registration_client_uri": d.URL + "/register/" + id,
				"client_secret_expires_at": 0})
		case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/register/"):
			id := strings.TrimPrefix(r.URL.Path, "/register/")
			if _, ok := d.clients[id]; !ok || r.Header.Get("Authorization") != "Bearer rat-"+id || m["client_id"] != id {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			d.clients[id] = m
			_ = json.NewEncoder(w).Encode(map[string]any{"client_id": id, "client_name": m["client_name"], "kagenti_owner": m["kagenti_owner"]}) // secret left out: unchanged
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *dcr) Requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.requests...)
}

func TestDynamicRegistration(t *testing.T) {
	d := newDCR(t)
	d.iat = "initial-token"
	state := filepath.Join(t.TempDir(), authconfig.RegistrationFile)
	p := &DynamicRegistration{URL: d.URL + "/register", HTTP: http.DefaultClient, StateFile: state,
		Admin: adminDir(t, map[string]string{"initial-access-token": "initial-token"})}
	ctx := context.Background()
	c := Client{Name: "agents/weather", Owner: "agents/weather", TokenExchange: true}
	creds, err := p.Register(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, Credentials{ClientID: "client-1", ClientSecret: "secret-of-client-1"}, creds)
	assert.Equal(t, []any{"client_credentials", "urn:ietf:params:oauth:grant-type:token-exchange"}, d.clients["client-1"]["grant_types"])
	assert.Equal(t, "client_secret_basic", d.clients["client-1"]["token_endpoint_auth_method"])
	info, err := os.Stat(state)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the registration access token stays private")

	again, err := p.Register(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, creds, again)
	assert.Len(t, d.Requests(), 1, "unchanged metadata: no call")

	c.Name = "agents/weather-v2"
	updated, err := p.Register(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, creds, updated, "an RFC 7592 update keeps the client and its secret")
	assert.Equal(t, "PUT /register/client-1", d.Requests()[1])
	assert.Equal(t, "agents/weather-v2", d.clients["client-1"]["client_name"])
	assert.Len(t, d.clients, 1)

	p.Admin = adminDir(t, nil)
	p.StateFile = filepath.Join(t.TempDir(), "registration.json")
	_, err = p.Register(ctx, c)
	assert.ErrorContains(t, err, "401 invalid_token (initial access token required)")
}

// TestDynamicRegistrationRefusesAClientOfAnotherOwner: a provider that answers a registration
// with an existing client of the same client_name (registered for team-b) does not give team-a's
// pod that client's secret: the answer is neither used nor remembered.
func TestDynamicRegistrationRefusesAClientOfAnotherOwner(t *testing.T) {
	d := newDCR(t)
	d.dedupe = true
	ctx := context.Background()
	teamB := &DynamicRegistration{URL: d.URL + "/register", HTTP: http.DefaultClient, Admin: adminDir(t, nil),
		StateFile: filepath.Join(t.TempDir(), authconfig.RegistrationFile)}
	_, err := teamB.Register(ctx, Client{Name: "team-b/agent", Owner: "team-b/agent", TokenExchange: true})
	require.NoError(t, err)
	assert.Equal(t, "team-b/agent", d.clients["client-1"]["kagenti_owner"], "the owner marker is sent as client metadata")

	state := filepath.Join(t.TempDir(), authconfig.RegistrationFile)
	teamA := &DynamicRegistration{URL: d.URL + "/register", HTTP: http.DefaultClient, Admin: adminDir(t, nil), StateFile: state}
	creds, err := teamA.Register(ctx, Client{Name: "team-b/agent", Owner: "team-a/thief"})
	var refused *ClientOwnedElsewhereError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, "team-b/agent", refused.Owner)
	assert.ErrorContains(t, err, "client client-1 at "+d.URL+"/register belongs to workload team-b/agent, not to team-a/thief, and is left untouched")
	assert.Equal(t, Credentials{}, creds)
	assert.NoFileExists(t, state, "nothing of team-b's client is remembered in team-a's pod")
}

// TestDynamicRegistrationRefusesARememberedClientOfAnotherOwner: a registration remembered on
// the shared volume for another owner, or for none (written by something else than this
// workload's register role), is neither reused nor updated, and the provider is not called.
func TestDynamicRegistrationRefusesARememberedClientOfAnotherOwner(t *testing.T) {
	for name, owner := range map[string]string{"another owner": "team-b/agent", "no owner": ""} {
		t.Run(name, func(t *testing.T) {
			d := newDCR(t)
			state := filepath.Join(t.TempDir(), authconfig.RegistrationFile)
			c := Client{Name: "team-a/agent", Owner: "team-a/agent"}
			// The metadata hash is c's: only the owner keeps the remembered client from being reused.
			remembered, err := json.Marshal(registration{ClientID: "client-9", ClientSecret: "secret-of-client-9", Owner: owner,
				RegistrationAccessToken: "rat-client-9", RegistrationClientURI: d.URL + "/register/client-9",
				Endpoint: d.URL + "/register", MetadataHash: hashOf(metadataFor(c))})
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(state, remembered, 0o600))
			p := &DynamicRegistration{URL: d.URL + "/register", HTTP: http.DefaultClient, Admin: adminDir(t, nil), StateFile: state}
			creds, err := p.Register(context.Background(), c)
			var refused *ClientOwnedElsewhereError
			require.ErrorAs(t, err, &refused)
			assert.Equal(t, owner, refused.Owner)
			assert.ErrorContains(t, err, "client client-9 registered at "+d.URL+"/register (remembered in "+state+")")
			assert.Equal(t, Credentials{}, creds)
			assert.Empty(t, d.Requests(), "the provider is not called")
		})
	}
}

func runnerConfig(t *testing.T, registrationURL string) (*sidecar.Config, string) {
	dir := t.TempDir()
	return sidecartest.Config(t, dir, registrationURL), dir
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunnerRegistersAndFollowsTheConfiguration(t *testing.T) {
	d := newDCR(t)
	cfg, dir := runnerConfig(t, d.URL+"/register")
	shared := t.TempDir()
	r := NewRunner(cfg, AdminCredentials{Dir: t.TempDir()}, shared, http.DefaultClient, zaptest.NewLogger(t))
	assert.NotEmpty(t, r.Ready(), "not ready before the first registration")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()

	read := func(f string) string { b, _ := os.ReadFile(filepath.Join(shared, f)); return string(b) }
	// The ID is written last (a reader that sees it finds its secret): wait for it.
	eventually(t, "credentials written", func() bool { return read(authconfig.ClientIDFile) == "client-1" })
	assert.Equal(t, "secret-of-client-1", read(authconfig.ClientSecretFile))
	eventually(t, "ready", func() bool { return len(r.Ready()) == 0 })
	assert.Equal(t, "agents/weather", d.clients["client-1"]["client_name"])

	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.ConfigFile),
		[]byte("clientRegistration: {keycloak: {clientNameTemplate: '{{.Namespace}}/agent-{{.PodName}}'}}\n"), 0o644))
	cfg.Reload()
	eventually(t, "re-registered under the new name", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.clients["client-1"]["client_name"] == "agents/agent-weather-abc"
	})
	eventually(t, "ready again", func() bool { return len(r.Ready()) == 0 })

	// The provider fails: the runner keeps running, reports it, and recovers.
	d.mu.Lock()
	d.down = true
	d.mu.Unlock()
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.ConfigFile), []byte("clientRegistration: {keycloak: {tokenExchangeEnabled: false}}\n"), 0o644))
	cfg.Reload()
	eventually(t, "failure reported", func() bool {
		return len(r.Ready()) > 0 && strings.Contains(r.Ready()[0], "registration with the identity provider failed")
	})
	d.mu.Lock()
	d.down = false
	d.mu.Unlock()
	eventually(t, "recovered", func() bool { return len(r.Ready()) == 0 })
	assert.Equal(t, []any{"client_credentials"}, d.clients["client-1"]["grant_types"])
	select {
	case <-done:
		t.Fatal("the runner must keep running (a native sidecar must not exit)")
	default:
	}
}

// TestRunnerReportsAClientOwnedElsewhere: the runner writes no credentials for a refused client,
// says why on /readyz, and reports the refusal (reason ClientOwnedElsewhere) for /status; once a
// person adopts the client, it registers.
func TestRunnerReportsAClientOwnedElsewhere(t *testing.T) {
	kc := newKeycloak(t, "agents")
	kc.store("billing-id", map[string]any{"clientId": "agents/weather", "attributes": map[string]any{OwnerAttribute: "agents/billing"}})
	cfg, _ := runnerConfig(t, "http://unused/register")
	shared := t.TempDir()
	r := NewRunner(cfg, AdminCredentials{Dir: t.TempDir()}, shared, http.DefaultClient, zaptest.NewLogger(t))
	admin := adminDir(t, serviceAccount)
	r.newProvider = func(authconfig.Config) (Provider, error) {
		return &Keycloak{URL: kc.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: admin}, nil
	}
	assert.Nil(t, r.Refusal(), "no refusal before a registration")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	eventually(t, "refusal reported", func() bool { return r.Refusal() != nil })
	refusal := r.Refusal()
	assert.Equal(t, sidecar.ReasonClientOwnedElsewhere, refusal.Reason)
	assert.Equal(t, `client "agents/weather" (id billing-id) in Keycloak realm agents belongs to workload agents/billing, not to agents/weather, and is left untouched: choose another clientNameTemplate`, refusal.Message)
	assert.Equal(t, []string{"registration refused: " + refusal.Message}, r.Ready())
	entries, err := os.ReadDir(shared)
	require.NoError(t, err)
	assert.Empty(t, entries, "no client ID or secret is written")
	readsNoSecretAndChangesNothing(t, kc.Requests())

	kc.mu.Lock()
	kc.clients["billing-id"]["attributes"].(map[string]any)[OwnerAttribute] = "agents/weather"
	kc.mu.Unlock()
	r.Kick()
	eventually(t, "registered after adoption", func() bool { return len(r.Ready()) == 0 })
	assert.Nil(t, r.Refusal())
	b, err := os.ReadFile(filepath.Join(shared, authconfig.ClientIDFile))
	require.NoError(t, err)
	assert.Equal(t, "agents/weather", string(b))
}

// clientAuthentication jwtSVID: registration is kagenti-tokenexchange's, so the role never calls
// the provider and writes no credentials; it is ready once the controller's client ID is in
// config.yaml, and says what it waits for until then.
func TestRunnerLeavesJWTSVIDClientsToTheController(t *testing.T) {
	d := newDCR(t)
	cfg, dir := runnerConfig(t, d.URL+"/register")
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.ConfigFile), []byte("clientRegistration: {clientAuthentication: jwtSVID}\n"), 0o644))
	cfg.Reload()
	require.NoError(t, cfg.Err())
	shared := t.TempDir()
	r := NewRunner(cfg, AdminCredentials{Dir: t.TempDir()}, shared, http.DefaultClient, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	eventually(t, "waiting for the controller", func() bool {
		ready := r.Ready()
		return len(ready) == 1 && strings.Contains(ready[0], "waiting for kagenti-tokenexchange to register the client")
	})
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.ConfigFile), []byte("clientRegistration: {clientAuthentication: jwtSVID, clientId: dyn-1}\n"), 0o644))
	cfg.Reload()
	eventually(t, "ready with the controller's client", func() bool { return len(r.Ready()) == 0 })
	r.Kick()
	cancel()
	<-done
	d.mu.Lock()
	defer d.mu.Unlock()
	assert.Empty(t, d.clients, "the role registered nothing")
	entries, err := os.ReadDir(shared)
	require.NoError(t, err)
	assert.Empty(t, entries, "no credentials written")
}
