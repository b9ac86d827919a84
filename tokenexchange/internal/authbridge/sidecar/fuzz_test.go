package sidecar

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/pkg/configmap/identity"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// FuzzIdentityDefaults feeds arbitrary bytes as the injector's defaults.env and config.yaml
// through the role's loader (parseDefaults, authconfig.DefaultsFromEnv, Parse, Resolve): nothing
// panics; an error names its line or its variable; accepted defaults survive a rewrite as
// NAME=VALUE lines; a resolved configuration hashes the same twice.
//
//	go test ./internal/authbridge/sidecar -run '^$' -fuzz FuzzIdentityDefaults -fuzztime 60s
func FuzzIdentityDefaults(f *testing.F) {
	known := map[string]bool{}
	for _, n := range authconfig.EnvNames() {
		known[n] = true
	}
	for _, seed := range []struct{ env, yaml string }{
		{"# the injector's defaults\nKAGENTI_TRUST_DOMAIN=example.org\n\nKAGENTI_CLIENT_NAME_TEMPLATE={{.Namespace}}/a=b\nPOD_NAMESPACE=from-defaults\nKAGENTI_IDP_URL=\n", ""},
		{"KAGENTI_TRUST_DOMIAN=x\n", ""},
		{"no equals sign\n", ""},
		{"KAGENTI_WORKLOAD=weather\nPOD_NAMESPACE=agents\nKAGENTI_INBOUND_PORT=99999\n", "inbound: {port: 9090}"},
		{"KAGENTI_WORKLOAD=weather\nPOD_NAMESPACE=agents\nKAGENTI_OUTBOUND_PORTS_EXCLUDE=1,2,x\n", "outbound: {trafficInterception: {excludePorts: [1]}}"},
		{"KAGENTI_WORKLOAD=weather\nPOD_NAMESPACE=agents\nKAGENTI_PROXY_UID=-1\n", "clientRegistration: {keycloak: {clientNameTemplate: '{{.PodName}}'}}"},
	} {
		f.Add([]byte(seed.env), []byte(seed.yaml))
	}
	f.Fuzz(func(t *testing.T, env, yaml []byte) {
		defaults, err := parseDefaults(env, known)
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "line ") || strings.Contains(err.Error(), "token too long"), "the error names the line: %v", err)
			return
		}
		var lines strings.Builder
		for _, n := range slices.Sorted(maps.Keys(defaults)) {
			fmt.Fprintf(&lines, "%s=%s\n", n, defaults[n])
		}
		again, err := parseDefaults([]byte(lines.String()), known)
		require.NoError(t, err, "accepted defaults rewritten as NAME=VALUE lines")
		require.Equal(t, defaults, again)

		lookup := func(name string) (string, bool) {
			if v, ok := defaults[name]; ok {
				return v, true
			}
			return identity.BuiltIn(name)
		}
		d, err := authconfig.DefaultsFromEnv(lookup)
		if err != nil {
			require.Contains(t, err.Error(), "environment variable KAGENTI_", "the error names the variable")
			return
		}
		spec, err := authconfig.Parse(yaml)
		if err != nil {
			return
		}
		c, err := authconfig.Resolve(d, spec, authconfig.WorkloadFromEnv(lookup))
		if err != nil {
			return
		}
		again2, err := authconfig.Resolve(d, spec, authconfig.WorkloadFromEnv(lookup))
		require.NoError(t, err)
		require.Equal(t, c.Hash(), again2.Hash(), "resolving is deterministic")
	})
}
