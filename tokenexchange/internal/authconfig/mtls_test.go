package authconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mtls.mode resolves to off when unset, keeps permissive and strict, refuses any other value and
// refuses mTLS without SPIFFE, each with its path in config.yaml.
func TestResolveMTLSMode(t *testing.T) {
	parse := func(y string) Spec {
		s, err := Parse([]byte(y))
		require.NoError(t, err)
		return s
	}
	spiffeOn := seedEnv()
	spiffeOn["KAGENTI_SPIFFE_ENABLED"] = "true"

	c, err := resolveEnv(t, spiffeOn, Spec{})
	require.NoError(t, err)
	assert.Equal(t, MTLSOff, c.MTLS.Mode)
	assert.False(t, c.MTLS.On())

	for _, mode := range []string{MTLSPermissive, MTLSStrict} {
		c, err = resolveEnv(t, spiffeOn, parse(`mtls: {mode: `+mode+`}`))
		require.NoError(t, err)
		assert.Equal(t, mode, c.MTLS.Mode)
		assert.True(t, c.MTLS.On())
	}

	_, err = resolveEnv(t, spiffeOn, parse(`mtls: {mode: Strict}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `mtls.mode: "Strict" is not off, permissive or strict`)

	spiffeOff := seedEnv()
	spiffeOff["KAGENTI_SPIFFE_ENABLED"] = "false"
	_, err = resolveEnv(t, spiffeOff, parse(`mtls: {mode: strict}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mtls.mode: strict needs SPIFFE (spiffe.enabled)")
}
