package inbound

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

// A JWKS redirect is not followed: whoever the Location names would choose the keys trusted.
func TestJWKSRedirectIsNotFollowed(t *testing.T) {
	trap := idptest.NewTrap(t)
	idp := idptest.NewRedirector(t, http.StatusFound, trap.URL)
	k := NewKeySet(idp.URL+"/certs", http.DefaultClient)
	err := k.Refresh(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), trap.URL+"/certs", "the error names the Location")
	assert.Empty(t, trap.Hits())
	assert.False(t, k.Loaded())
}
