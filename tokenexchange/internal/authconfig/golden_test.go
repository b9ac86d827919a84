package authconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The tokenexchange controller's golden ConfigMaps (internal/resources/testdata, refreshed by
// its own tests) are this package's fixtures: whatever the controller writes, the data plane
// loads. A change on either side that breaks the other fails here.
const controllerGoldens = "../resources/testdata"

// ControllerConfig returns config.yaml of the controller's golden ConfigMap for case name.
func controllerConfig(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(controllerGoldens, name+".golden.yaml"))
	require.NoError(t, err)
	var cm struct {
		Data map[string]string `json:"data"`
	}
	require.NoError(t, yaml.Unmarshal(b, &cm))
	require.Contains(t, cm.Data, ConfigFile)
	return []byte(cm.Data[ConfigFile])
}

func TestEveryControllerGoldenLoads(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join(controllerGoldens, "*.golden.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	for _, g := range goldens {
		name := strings.TrimSuffix(filepath.Base(g), ".golden.yaml")
		t.Run(name, func(t *testing.T) {
			s, err := Parse(controllerConfig(t, name))
			require.NoError(t, err)
			_, err = resolveEnv(t, seedEnv(), s)
			require.NoError(t, err)
		})
	}
}

func TestControllerGoldensResolve(t *testing.T) {
	load := func(name string) Config {
		s, err := Parse(controllerConfig(t, name))
		require.NoError(t, err)
		c, err := resolveEnv(t, seedEnv(), s)
		require.NoError(t, err)
		return c
	}

	seed := load("seed")
	assert.Equal(t, "spiffe://prod.cluster.local/ns/agents/sa/agent-sa", seed.Inbound.Validation.Audience)
	assert.Equal(t, "/run/spire/agent-sockets/agent.sock", seed.Spiffe.SocketPath, "unix:// is dropped")
	assert.Equal(t, "agents/agent-weather-agent-7d9f-abcde", seed.ClientRegistration.ClientName)
	assert.Equal(t, "http://keycloak-prod.example.com/realms/production", seed.Inbound.Validation.Issuer)
	assert.Equal(t, []int32{5432, 8080, 9901}, seed.Outbound.Interception.ExcludePorts)
	assert.Equal(t, "kagenti-agents", seed.Spiffe.Audience, "a field the spec leaves out keeps the injector's default")

	rules := load("rules")
	tokenURL := "http://keycloak.kagenti-system.svc:8080/realms/agents/protocol/openid-connect/token"
	assert.Equal(t, tokenURL, rules.Outbound.TokenExchange.TokenURL, "derived from the default URL and the spec's realm")
	assert.Equal(t, []Route{
		{Host: "premium-api.external.com", Target: Target{Audience: "premium-api", Scopes: []string{"weather:premium", "weather:historical"}}},
		{Host: "weather-tool.agents.svc.cluster.local:8000", Target: Target{Audience: "weather-tool", Scopes: []string{"openid", "default:read"}}},
		{Host: "*.tools.svc.cluster.local", Target: Target{Audience: "default-aud", Scopes: []string{"tools:invoke"}}},
		{Host: "catalog.internal", Target: Target{Audience: "default-aud", Scopes: []string{"openid", "default:read"}}},
		{Host: "*.googleapis.com", Passthrough: true, Target: Target{Scopes: []string{}}},
	}, rules.Outbound.TokenExchange.Routes)

	off := load("exchange-disabled")
	assert.False(t, off.Exchanges())
	assert.False(t, off.ClientRegistration.Enabled)
	assert.Equal(t, OutputJWT, off.Spiffe.OutputFormat)
	assert.Equal(t, int32(9090), off.Inbound.Port)
	assert.Equal(t, int32(15001), off.Outbound.Interception.ProxyPort)

	minimal := load("minimal")
	defaults, err := resolveEnv(t, seedEnv(), Spec{})
	require.NoError(t, err)
	assert.Equal(t, defaults, minimal, "a TokenExchange that sets nothing runs the injector's defaults")
}
