package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

// A token endpoint that redirects would have net/http re-POST the subject token and the client's
// secret or assertion to the Location: the exchange fails instead, naming where it pointed, even
// with a client that follows redirects.
func TestTokenEndpointRedirectIsNotFollowedWithTheSecrets(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		for name, creds := range map[string]Credentials{
			"client secret":    {ClientID: "agents/caller", ClientSecret: "s3cret"},
			"client assertion": {ClientID: "agents/caller", Assertion: "svid-jwt"},
		} {
			t.Run(http.StatusText(status)+"/"+name, func(t *testing.T) {
				trap := idptest.NewTrap(t)
				idp := idptest.NewRedirector(t, status, trap.URL)
				e := NewExchanger(http.DefaultClient) // follows redirects by itself
				_, err := e.Exchange(context.Background(), Request{TokenURL: idp.URL + "/token", SubjectToken: "user-token", Audience: "api", Credentials: creds})
				var xe *ExchangeError
				require.True(t, errors.As(err, &xe), "%v", err)
				assert.Equal(t, http.StatusBadGateway, xe.Status)
				assert.Contains(t, xe.Description, fmt.Sprintf("answered %d %s", status, http.StatusText(status)))
				assert.Contains(t, xe.Description, trap.URL+"/token", "the error names the Location")
				assert.Empty(t, trap.Hits(), "the subject token and the credentials never reach the second host")
			})
		}
	}
}
