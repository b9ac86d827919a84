package sidecar

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func TestIdentityLookup(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write(authconfig.IdentityDefaultsFile, "# the injector's defaults\nKAGENTI_TRUST_DOMAIN=example.org\n\nKAGENTI_CLIENT_NAME_TEMPLATE={{.Namespace}}/a=b\nPOD_NAMESPACE=from-defaults\n")
	write("POD_NAMESPACE", "agents\n") // the downward API's file wins over a line
	write("POD_NAME", "weather-agent-abc")
	env := map[string]string{"KAGENTI_TRUST_DOMAIN": "from-env", "KAGENTI_REALM": ""}
	lookup, err := IdentityLookup(dir, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	get := func(k string) string { v, _ := lookup(k); return v }
	assert.Equal(t, "from-env", get("KAGENTI_TRUST_DOMAIN"), "the environment wins")
	assert.Equal(t, "{{.Namespace}}/a=b", get("KAGENTI_CLIENT_NAME_TEMPLATE"), "split at the first =")
	assert.Equal(t, "agents", get("POD_NAMESPACE"))
	assert.Equal(t, "weather-agent-abc", get("POD_NAME"))
	_, ok := lookup("KAGENTI_REALM")
	assert.False(t, ok, "an empty variable and no default: unset")

	s, err := authconfig.DefaultsFromEnv(lookup)
	require.NoError(t, err)
	assert.Equal(t, "from-env", s.Spiffe.TrustDomain)
	assert.Equal(t, "agents", authconfig.WorkloadFromEnv(lookup).Namespace)
}

func TestIdentityLookupRejectsUnknownNames(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.IdentityDefaultsFile), []byte("KAGENTI_TRUST_DOMIAN=x\n"), 0o644))
	_, err := IdentityLookup(dir, os.LookupEnv)
	require.ErrorContains(t, err, "line 1: KAGENTI_TRUST_DOMIAN is not an identity variable")
	require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.IdentityDefaultsFile), []byte("no equals sign\n"), 0o644))
	_, err = IdentityLookup(dir, os.LookupEnv)
	require.ErrorContains(t, err, "is not NAME=VALUE")
}

func TestIdentityLookupWithoutDirectory(t *testing.T) {
	lookup, err := IdentityLookup(filepath.Join(t.TempDir(), "missing"), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	_, ok := lookup("POD_NAME")
	assert.False(t, ok)
}
