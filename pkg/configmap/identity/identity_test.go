package identity

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The typed constants, which the injector's configuration defaults to, and the variables' text,
// which the data plane reads, are the same values.
func TestBuiltInMatchesTheConstants(t *testing.T) {
	for name, want := range map[string]string{
		"KAGENTI_TRUST_DOMAIN":         TrustDomain,
		"KAGENTI_SPIFFE_ENABLED":       strconv.FormatBool(SpiffeEnabled),
		"KAGENTI_IDP_URL":              IdPURL,
		"KAGENTI_REALM":                Realm,
		"KAGENTI_CLIENT_NAME_TEMPLATE": ClientNameTemplate,
		"KAGENTI_INBOUND_PORT":         strconv.Itoa(InboundPort),
		"KAGENTI_TARGET_PORT":          strconv.Itoa(TargetPort),
		"KAGENTI_OUTBOUND_PORT":        strconv.Itoa(OutboundPort),
		"KAGENTI_PROXY_UID":            strconv.Itoa(ProxyUID),
		"KAGENTI_DEFAULT_AUDIENCE":     DefaultAudience,
	} {
		got, ok := BuiltIn(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
	}
	assert.Len(t, builtIn, 10, "no built-in value beyond these")
	_, ok := BuiltIn("KAGENTI_SPIFFE_SOCKET")
	assert.False(t, ok, "written only with SPIFFE on, so no built-in")
}
