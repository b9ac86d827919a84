package configmap

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	assert.Equal(t, "weather-agent-token-exchange", TokenExchangeName("weather-agent"))
	assert.Equal(t, "weather-agent-trace", TraceName("weather-agent"))
	assert.Equal(t, "weather-agent-agent-policy", AgentPolicyName("weather-agent"))
	assert.Equal(t, "weather-agent-deployment-card", AgentCardName("weather-agent", "Deployment"))
	assert.Equal(t, "nightly-cronjob-card", AgentCardName("nightly", "CronJob"))
}

func TestChildNameIsDeterministicAndLengthSafe(t *testing.T) {
	long := strings.Repeat("a", 60)
	a, b := TokenExchangeName(long), TokenExchangeName(long)
	assert.Equal(t, a, b, "the same workload always gets the same name, in every binary")
	assert.LessOrEqual(t, len(a), validation.DNS1123LabelMaxLength)
	assert.Empty(t, validation.IsDNS1123Label(a))
	assert.NotEqual(t, a, TokenExchangeName(strings.Repeat("a", 59)+"b"), "shortened names stay distinct")
	assert.NotEqual(t, TokenExchangeName(long), TraceName(long))
}

// The label keys are the Kubernetes recommended labels: tools (kubectl, dashboards, kustomize)
// group objects by these exact keys.
func TestRecommendedLabelKeys(t *testing.T) {
	for key, want := range map[string]string{
		PartOfLabel:    "app.kubernetes.io/part-of",
		ComponentLabel: "app.kubernetes.io/component",
		ManagedByLabel: "app.kubernetes.io/managed-by",
	} {
		assert.Equal(t, want, key)
		assert.Empty(t, validation.IsQualifiedName(key), key)
	}
}

func TestComponentsOfContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"auth-proxy", []string{"inbound"}, []string{"auth-proxy"}},
		{"spiffe-helper", nil, []string{"spiffe-helper"}},
		{"authbridge", []string{"sidecar", "register", "inbound", "outbound"}, []string{"client-registration", "auth-proxy", "envoy-proxy"}},
		{"authbridge", []string{"sidecar", "inbound", "outbound"}, []string{"auth-proxy", "envoy-proxy"}},
		{"authbridge", []string{"inbound"}, nil},
		{"authbridge", nil, nil},
		{"agent", []string{"sidecar", "inbound"}, nil},
	} {
		assert.Equal(t, tc.want, ComponentsOfContainer(tc.name, tc.args), "%s %v", tc.name, tc.args)
	}
}
