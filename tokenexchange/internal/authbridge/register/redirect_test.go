package register

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Redirects from the identity provider are never followed: net/http would resend the admin
// password, the client secret or the registration token to the Location.

func TestKeycloakAdminLoginRedirectIsNotFollowedWithThePassword(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		for name, admin := range map[string]map[string]string{
			"password":           {"username": "admin", "password": "admin-pw"},
			"client credentials": serviceAccount,
		} {
			t.Run(http.StatusText(status)+"/"+name, func(t *testing.T) {
				trap := idptest.NewTrap(t)
				idp := idptest.NewRedirector(t, status, trap.URL)
				p := &Keycloak{URL: idp.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, admin)}
				_, err := p.Register(context.Background(), Client{Name: "agents/weather", Owner: "agents/weather"})
				require.Error(t, err)
				assert.Contains(t, err.Error(), trap.URL+"/realms/", "the error names the Location")
				assert.Contains(t, err.Error(), "not followed")
				assert.Empty(t, trap.Hits(), "the admin credentials never reach the second host")
			})
		}
	}
}

func TestKeycloakAdminAPIRedirectIsNotFollowedWithTheToken(t *testing.T) {
	kc := newKeycloak(t, "agents")
	trap := idptest.NewTrap(t)
	// The login is answered; every admin API call is redirected.
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/protocol/openid-connect/token") {
			kc.Config.Handler.ServeHTTP(w, r)
			return
		}
		http.Redirect(w, r, trap.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(idp.Close)
	p := &Keycloak{URL: idp.URL, Realm: "agents", HTTP: http.DefaultClient, Admin: adminDir(t, serviceAccount)}
	_, err := p.Register(context.Background(), Client{Name: "agents/weather", Owner: "agents/weather"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), trap.URL+"/admin/realms/agents/clients", "the error names the Location")
	assert.Empty(t, trap.Hits(), "the admin token never reaches the second host")
}

func TestRegistrationRedirectIsNotFollowedWithTheToken(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			trap := idptest.NewTrap(t)
			idp := idptest.NewRedirector(t, status, trap.URL)
			p := &DynamicRegistration{URL: idp.URL + "/register", HTTP: http.DefaultClient,
				StateFile: filepath.Join(t.TempDir(), authconfig.RegistrationFile),
				Admin:     adminDir(t, map[string]string{"initial-access-token": "initial-token"})}
			_, err := p.Register(context.Background(), Client{Name: "agents/weather", Owner: "agents/weather", TokenExchange: true})
			require.Error(t, err)
			assert.Contains(t, err.Error(), trap.URL+"/register", "the error names the Location")
			assert.Empty(t, trap.Hits(), "the initial access token never reaches the second host")
		})
	}
}
