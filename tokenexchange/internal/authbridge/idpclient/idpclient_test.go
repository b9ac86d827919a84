package idpclient

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

// redirectStatuses are the answers net/http follows; 307 and 308 resend the body.
var redirectStatuses = []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}

func post(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("client_secret=s3cret"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-token")
	return req
}

func TestRedirectsAreNotFollowedWithTheSecrets(t *testing.T) {
	for _, status := range redirectStatuses {
		t.Run(http.StatusText(status), func(t *testing.T) {
			trap := idptest.NewTrap(t)
			idp := idptest.NewRedirector(t, status, trap.URL)
			clients := map[string]func(*http.Request) (*http.Response, error){
				"New":                   New().Do,
				"Do with DefaultClient": func(r *http.Request) (*http.Response, error) { return Do(http.DefaultClient, r) },
				"Do with a nil client":  func(r *http.Request) (*http.Response, error) { return Do(nil, r) },
				"Do with a following fn": func(r *http.Request) (*http.Response, error) {
					return Do(&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}, r)
				},
			}
			for name, do := range clients {
				resp, err := do(post(t, idp.URL+"/token"))
				if resp != nil {
					resp.Body.Close()
				}
				var re *RedirectError
				require.True(t, errors.As(err, &re), "%s: want a *RedirectError, got %v", name, err)
				assert.Equal(t, trap.URL+"/token", re.Location, name)
				assert.Equal(t, idp.URL+"/token", re.URL, name)
				assert.Contains(t, err.Error(), trap.URL+"/token", "%s: the error names the Location", name)
			}
			assert.Empty(t, trap.Hits(), "the second host received nothing")
		})
	}
}

func TestOAuthErrorText(t *testing.T) {
	assert.Equal(t, "invalid_token (not an allowed registrar)", OAuthError{Error: "invalid_token", ErrorDescription: "not an allowed registrar"}.Text(401))
	assert.Equal(t, "invalid_client", OAuthError{Error: "invalid_client"}.Text(401))
	assert.Equal(t, "Service Unavailable", OAuthError{}.Text(503), "no error named: the status says it")
	assert.Empty(t, OAuthError{}.Text(201))
}
