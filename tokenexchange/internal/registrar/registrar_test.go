package registrar

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedSVID hands out one SVID (its token is not checked by these providers) or an error.
type fixedSVID struct{ err error }

func (f fixedSVID) FetchJWTSVID(_ context.Context, p jwtsvid.Params) (*jwtsvid.SVID, error) {
	if f.err != nil {
		return nil, f.err
	}
	// Unsigned for these providers, which do not verify it (the dev IdP does, in the controller's
	// envtest): header {"alg":"ES256","kid":"k"}, the claims, a dummy signature.
	claims, _ := json.Marshal(map[string]any{"sub": "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-tokenexchange", "aud": []string{p.Audience}, "exp": 4102444800})
	return jwtsvid.ParseInsecure("eyJhbGciOiJFUzI1NiIsImtpZCI6ImsifQ."+base64.RawURLEncoding.EncodeToString(claims)+".c2ln", []string{p.Audience})
}

var client = Client{Issuer: "http://idp", Name: "agents/caller", Owner: "agents/caller", SpiffeID: "spiffe://cluster.local/ns/agents/sa/caller", TokenExchange: true}

// provider answers every registration with status and answer, and keeps what it was sent.
func provider(t *testing.T, status int, answer map[string]any) (*httptest.Server, *map[string]any) {
	got := map[string]any{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		got["authorization"] = r.Header.Get("Authorization")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func register(t *testing.T, srv *httptest.Server, svids SVIDSource) (Registered, error) {
	c := client
	c.RegistrationURL = srv.URL + "/register"
	return (&Registrar{SVIDs: svids, HTTP: srv.Client()}).Register(context.Background(), c)
}

func TestRegisterSendsABoundPrivateKeyJWTClient(t *testing.T) {
	srv, got := provider(t, http.StatusCreated, map[string]any{"client_id": "dyn-1", "token_endpoint_auth_method": "private_key_jwt",
		"spiffe_id": client.SpiffeID, "kagenti_owner": client.Owner, "registration_access_token": "never-kept"})
	reg, err := register(t, srv, fixedSVID{})
	require.NoError(t, err)
	assert.Equal(t, Registered{ClientID: "dyn-1", Registrar: "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-tokenexchange"}, reg)
	assert.Equal(t, "private_key_jwt", (*got)["token_endpoint_auth_method"])
	assert.Equal(t, client.SpiffeID, (*got)["spiffe_id"])
	assert.Equal(t, client.Owner, (*got)["kagenti_owner"])
	assert.Equal(t, []any{"client_credentials", "urn:ietf:params:oauth:grant-type:token-exchange"}, (*got)["grant_types"])
	assert.Contains(t, (*got)["authorization"], "Bearer eyJhbGciOiJFUzI1NiIsImtpZCI6ImsifQ.", "authenticated with the controller's SVID")
}

// Answers that cannot be used are refused, each with its reason; a provider error is Refused
// (4xx) or Unreachable (5xx, no answer); no SVID is NoSVID.
func TestRegisterRefusesWhatCannotBeUsed(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		answer map[string]any
		kind   string
		says   string
	}{
		"a client secret":     {http.StatusCreated, map[string]any{"client_id": "dyn-1", "client_secret": "s"}, Refused, "issued client dyn-1 a client secret"},
		"another SPIFFE ID":   {http.StatusCreated, map[string]any{"client_id": "dyn-1", "spiffe_id": "spiffe://cluster.local/ns/agents/sa/other"}, Refused, "bound client dyn-1 to spiffe://cluster.local/ns/agents/sa/other"},
		"another owner":       {http.StatusCreated, map[string]any{"client_id": "dyn-1", "kagenti_owner": "agents/other"}, Refused, "of workload agents/other"},
		"another auth method": {http.StatusCreated, map[string]any{"client_id": "dyn-1", "token_endpoint_auth_method": "client_secret_basic"}, Refused, "for client_secret_basic"},
		"no client_id":        {http.StatusCreated, map[string]any{}, Refused, "no client_id"},
		"a refusal":           {http.StatusUnauthorized, map[string]any{"error": "invalid_token", "error_description": "not an allowed registrar"}, Refused, "401 invalid_token (not an allowed registrar)"},
		"a failing provider":  {http.StatusServiceUnavailable, map[string]any{}, Unreachable, "503 Service Unavailable"},
	} {
		t.Run(name, func(t *testing.T) {
			srv, _ := provider(t, tc.status, tc.answer)
			_, err := register(t, srv, fixedSVID{})
			require.Error(t, err)
			assert.Equal(t, tc.kind, KindOf(err))
			assert.Contains(t, err.Error(), tc.says)
		})
	}
	srv, _ := provider(t, http.StatusCreated, map[string]any{"client_id": "dyn-1"})
	_, err := register(t, srv, fixedSVID{err: errors.New("no entry")})
	assert.Equal(t, NoSVID, KindOf(err))
	assert.ErrorContains(t, err, "no entry")
	srv.Close()
	_, err = register(t, srv, fixedSVID{})
	assert.Equal(t, Unreachable, KindOf(err))
}
