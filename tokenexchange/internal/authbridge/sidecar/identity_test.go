package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/pkg/configmap/identity"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func TestIdentityLookup(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write(authconfig.IdentityDefaultsFile, "# the injector's defaults\nKAGENTI_TRUST_DOMAIN=example.org\n\nKAGENTI_CLIENT_NAME_TEMPLATE={{.Namespace}}/a=b\nPOD_NAMESPACE=from-defaults\nKAGENTI_IDP_URL=\n")
	write("POD_NAMESPACE", "agents\n") // the downward API's file wins over a line
	write("POD_NAME", "weather-agent-abc")
	env := map[string]string{"KAGENTI_TRUST_DOMAIN": "from-env", "KAGENTI_REALM": "", "KAGENTI_OIDC_ISSUER": ""}
	lookup, err := IdentityLookup(dir, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	get := func(k string) string { v, _ := lookup(k); return v }
	assert.Equal(t, "from-env", get("KAGENTI_TRUST_DOMAIN"), "the environment wins")
	assert.Equal(t, "{{.Namespace}}/a=b", get("KAGENTI_CLIENT_NAME_TEMPLATE"), "split at the first =")
	assert.Equal(t, "agents", get("POD_NAMESPACE"))
	assert.Equal(t, "weather-agent-abc", get("POD_NAME"))
	_, ok := lookup("KAGENTI_OIDC_ISSUER")
	assert.False(t, ok, "an empty variable, no line and no built-in default: unset")
	assert.Equal(t, identity.Realm, get("KAGENTI_REALM"), "an empty variable and no line: the built-in default")
	v, ok := lookup("KAGENTI_IDP_URL")
	assert.True(t, ok)
	assert.Empty(t, v, "an empty line unsets the built-in default")

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
	assert.Equal(t, identity.TrustDomain, func() string { v, _ := lookup("KAGENTI_TRUST_DOMAIN"); return v }(), "the built-in defaults hold without the volume too")
}

// injectorIdentityGoldens holds the injector's identity defaults for a table of configurations
// (injector/internal/inject's TestIdentityDefaultsGolden): <case>.env as the injector writes them
// now, only what differs from the built-in defaults, and v1/<case>.env as it wrote them before,
// every value spelt out.
const injectorIdentityGoldens = "../../../../injector/internal/inject/testdata/identity"

// TestBuiltInDefaultsResolveAsBefore proves the lean identity defaults change nothing: a pod
// rendered with the default configuration, and one with every field of it changed (and each
// switch off), resolves through the identity volume and the built-in defaults to exactly the
// configuration its complete v1 lines resolved to without them, under config.yaml overrides too.
func TestBuiltInDefaultsResolveAsBefore(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(injectorIdentityGoldens, "v1", "*.env"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "the injector's identity goldens moved: update injectorIdentityGoldens")
	off, on := false, true
	overrides := map[string]authconfig.Spec{
		"none":              {},
		"spiffe off":        {Spiffe: &authconfig.SpiffeSpec{Enabled: &off}},
		"keycloak selected": {ClientRegistration: &authconfig.ClientRegistrationSpec{Provider: authconfig.ProviderKeycloak, Enabled: &on}},
		"ports":             {Inbound: &authconfig.InboundSpec{TargetPort: ptr.To[int32](7000)}},
	}
	// changed holds the variables some case sets to other than the data plane's default.
	changed := map[string]bool{}
	for _, v1 := range files {
		name := filepath.Base(v1)
		t.Run(name, func(t *testing.T) {
			before, err := os.ReadFile(v1)
			require.NoError(t, err)
			known := map[string]bool{}
			for _, n := range authconfig.EnvNames() {
				known[n] = true
			}
			lines, err := parseDefaults(before, known)
			require.NoError(t, err)
			for _, e := range authconfig.EnvDefaults {
				v, ok := lines[e.Name]
				def, hasDefault := identity.BuiltIn(e.Name)
				// A built-in default is changed by a line with another value, or by none (the
				// variable was unset, or for a switch on); a variable without one by a line.
				if hasDefault && (!ok || v != def) || !hasDefault && ok && v != "" {
					changed[e.Name] = true
				}
			}
			pod := map[string]string{authconfig.EnvPodName: "weather-agent-0", authconfig.EnvPodNamespace: "agents"}
			// Before: the data plane had no built-in defaults; a missing line was unset.
			oldLookup := func(k string) (string, bool) {
				if v, ok := pod[k]; ok {
					return v, true
				}
				v, ok := lines[k]
				return v, ok
			}
			oldDefaults, err := authconfig.DefaultsFromEnv(oldLookup)
			require.NoError(t, err)

			// Now: the injector's lean file in the identity volume, read by the binary's lookup.
			lean, err := os.ReadFile(filepath.Join(injectorIdentityGoldens, name))
			require.NoError(t, err)
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, authconfig.IdentityDefaultsFile), lean, 0o644))
			for k, v := range pod {
				require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644))
			}
			lookup, err := IdentityLookup(dir, func(string) (string, bool) { return "", false })
			require.NoError(t, err)
			newDefaults, err := authconfig.DefaultsFromEnv(lookup)
			require.NoError(t, err)
			require.Equal(t, authconfig.WorkloadFromEnv(oldLookup), authconfig.WorkloadFromEnv(lookup))

			w := authconfig.WorkloadFromEnv(lookup)
			for oname, o := range overrides {
				want, wantErr := authconfig.Resolve(oldDefaults, o, w)
				got, gotErr := authconfig.Resolve(newDefaults, o, w)
				assert.Equal(t, want, got, "overrides %s", oname)
				assert.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(gotErr), "overrides %s", oname)
			}
		})
	}
	// The table covers every identity default.
	for _, e := range authconfig.EnvDefaults {
		assert.True(t, changed[e.Name], "no case of the injector's identity goldens changes %s", e.Name)
	}
}
