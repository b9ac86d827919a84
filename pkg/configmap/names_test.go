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
