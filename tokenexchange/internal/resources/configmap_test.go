package resources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// Golden files: testdata/<case>.input.yaml is a TokenExchange, testdata/<case>.golden.yaml the
// ConfigMap MakeConfigMap renders for it. Refresh with UPDATE_GOLDEN=1 go test ./internal/resources/.
var update = os.Getenv("UPDATE_GOLDEN") == "1"

func readInput(t testing.TB, path string) *v1alpha1.TokenExchange {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	te := &v1alpha1.TokenExchange{}
	require.NoError(t, yaml.UnmarshalStrict(b, te), path)
	return te
}

func targetOf(te *v1alpha1.TokenExchange) Target {
	return Target{Kind: te.Spec.TargetRef.Kind, Name: te.Spec.TargetRef.Name, Namespace: te.Namespace, ServiceAccount: "agent-sa"}
}

func TestMakeConfigMapGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	used := map[string]bool{}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		golden := filepath.Join("testdata", name+".golden.yaml")
		used[golden] = true
		t.Run(name, func(t *testing.T) {
			te := readInput(t, in)
			got, err := yaml.Marshal(MakeConfigMap(te, targetOf(te), DefaultIdentity()))
			require.NoError(t, err)
			if update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
			assert.Equal(t, string(want), string(got), "rendering changed; if intended, run with UPDATE_GOLDEN=1")
		})
	}
	goldens, err := filepath.Glob("testdata/*.golden.yaml")
	require.NoError(t, err)
	for _, g := range goldens {
		if !used[g] {
			if update {
				require.NoError(t, os.Remove(g))
				continue
			}
			t.Errorf("stale golden file %s has no input; delete it or run with UPDATE_GOLDEN=1", g)
		}
	}
}

func TestMakeConfigMapIsDeterministic(t *testing.T) {
	te := readInput(t, "testdata/seed.input.yaml")
	a := MakeConfigMap(te, targetOf(te), DefaultIdentity())
	for range 20 {
		assert.Equal(t, a, MakeConfigMap(te, targetOf(te), DefaultIdentity()))
	}
}

func TestMakeConfigMapNameAndKeys(t *testing.T) {
	te := readInput(t, "testdata/minimal.input.yaml")
	cm := MakeConfigMap(te, targetOf(te), DefaultIdentity())
	assert.Equal(t, "weather-agent-token-exchange", cm.Name)
	assert.Equal(t, "agents", cm.Namespace)
	assert.ElementsMatch(t, []string{ConfigKey, RoutesKey, HelperKey}, keys(cm.Data))

	long := strings.Repeat("a", 60)
	cm = MakeConfigMap(te, Target{Kind: "Deployment", Name: long, Namespace: "agents"}, DefaultIdentity())
	assert.LessOrEqual(t, len(cm.Name), 63, "names are shortened with a hash")
}

func TestResolveConfigDefaults(t *testing.T) {
	te := readInput(t, "testdata/minimal.input.yaml")
	d := DefaultIdentity()
	c := ResolveConfig(te, targetOf(te), d)
	assert.Equal(t, "cluster.local", c.Spiffe.TrustDomain)
	assert.Equal(t, "/run/spire/agent-sockets/agent.sock", c.Spiffe.SocketPath)
	assert.Equal(t, "kagenti-agents", c.Spiffe.Audience)
	assert.Equal(t, "http://keycloak.kagenti-system.svc:8080", c.ClientRegistration.Keycloak.URL)
	assert.Equal(t, "default", c.ClientRegistration.Keycloak.Realm)
	assert.True(t, c.ClientRegistration.Keycloak.TokenExchangeEnabled)
	assert.Equal(t, int32(8080), c.Inbound.Port)
	assert.Equal(t, int32(8081), c.Inbound.TargetPort)
	assert.Equal(t, "spiffe://cluster.local/ns/agents/sa/agent-sa", c.Inbound.Validation.Audience)
	assert.Equal(t, "http://keycloak.kagenti-system.svc:8080/realms/default", c.Inbound.Validation.Issuer)
	name, err := v1alpha1.RenderClientName(c.ClientRegistration.Keycloak.ClientNameTemplate,
		v1alpha1.ClientNameVars{Namespace: "agents", WorkloadName: "agent"})
	assert.NoError(t, err, "the default clientNameTemplate is one the sidecar can render")
	assert.Equal(t, "agents/agent", name)
	assert.Equal(t, int32(15123), c.Outbound.TrafficInterception.ProxyPort)
	assert.Equal(t, int64(1337), c.Outbound.TrafficInterception.ProxyUID)
	assert.Equal(t, []int32{8080}, c.Outbound.TrafficInterception.ExcludePorts)
	assert.Equal(t, "downstream-service", c.Outbound.TokenExchange.DefaultTarget.Audience)
	assert.Equal(t, "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/token", c.Outbound.TokenExchange.TokenURL)
}

func TestRoutesShapes(t *testing.T) {
	te := readInput(t, "testdata/rules.input.yaml")
	routes := Routes(ResolveConfig(te, targetOf(te), DefaultIdentity()))
	tokenURL := "http://keycloak.kagenti-system.svc:8080/realms/agents/protocol/openid-connect/token"
	assert.Equal(t, []Route{
		{Host: "premium-api.external.com", TargetAudience: "premium-api", TokenScopes: "weather:premium weather:historical", TokenURL: tokenURL},
		{Host: "weather-tool.agents.svc.cluster.local:8000", TargetAudience: "weather-tool", TokenScopes: "openid default:read", TokenURL: tokenURL},
		{Host: "*.tools.svc.cluster.local", TargetAudience: "default-aud", TokenScopes: "tools:invoke", TokenURL: tokenURL},
		{Host: "catalog.internal", TargetAudience: "default-aud", TokenScopes: "openid default:read", TokenURL: tokenURL},
		{Host: "*.googleapis.com", Passthrough: true},
	}, routes)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func BenchmarkMakeConfigMap(b *testing.B) {
	te := readInput(b, "testdata/seed.input.yaml")
	t, d := targetOf(te), DefaultIdentity()
	b.ReportAllocs()
	for b.Loop() {
		MakeConfigMap(te, t, d)
	}
}

func BenchmarkMakeConfigMap64Rules(b *testing.B) {
	te := readInput(b, "testdata/seed.input.yaml")
	rules := te.Spec.Outbound.TokenExchange.DestinationRules
	for i := len(rules); i < 64; i++ {
		r := rules[0]
		r.Match.Host = strings.Repeat("x", i%10+1) + ".example.com"
		rules = append(rules, r)
	}
	te.Spec.Outbound.TokenExchange.DestinationRules = rules
	t, d := targetOf(te), DefaultIdentity()
	b.ReportAllocs()
	for b.Loop() {
		MakeConfigMap(te, t, d)
	}
}
