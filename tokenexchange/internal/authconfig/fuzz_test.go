package authconfig

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzLoadConfig feeds arbitrary bytes to the config.yaml loader: Parse and Resolve never panic,
// a parsed Spec survives Marshal/Parse unchanged, and a resolved Config renders a helper.conf.
//
//	go test ./internal/authconfig -run '^$' -fuzz FuzzLoadConfig -fuzztime 60s
func FuzzLoadConfig(f *testing.F) {
	for _, seed := range []string{
		"", "{}", "inbound: {port: 9090}", "outbound:\n  tokenExchange:\n    destinationRules:\n    - match: {host: '*.x'}\n",
		"spiffe: {socketPath: 'unix:///a'}", "clientRegistration: {keycloak: {clientNameTemplate: '{{.PodName}}'}}",
		"inbound: {validation: {audience: self, requiredScopes: []}}", "outbound: {trafficInterception: {excludePorts: [1, 1, 65535]}}",
		"unknown: 1", "inbound: {port: 99999999999}", "- a\n- b", "a: &a [*a, *a]",
	} {
		f.Add([]byte(seed))
	}
	d, err := DefaultsFromEnv(lookup(seedEnv()))
	require.NoError(f, err)
	w := WorkloadFromEnv(lookup(seedEnv()))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Parse(Marshal(s))
		require.NoError(t, err, "a parsed Spec marshals to a valid config.yaml")
		require.Equal(t, Marshal(s), Marshal(again), "Marshal/Parse round trip")
		c, err := Resolve(d, s, w)
		if err != nil {
			return
		}
		_ = RenderHelperConf(c, HelperOptions{CertDir: SharedDir, FileMode: DefaultHelperFileMode})
		_ = c.Hash()
	})
}
