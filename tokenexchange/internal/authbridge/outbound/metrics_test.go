package outbound

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
)

// TestExchangesAreMetrics: each exchange is counted as issued (the identity provider answered,
// timed), cached or failed.
func TestExchangesAreMetrics(t *testing.T) {
	m := telemetry.Default
	count := func(result string) float64 {
		return m.Sum("kagenti_authbridge_exchanges_total", map[string]string{"result": result})
	}
	issued, cached, failed, timed := count("issued"), count("cached"), count("failed"), m.Sum("kagenti_authbridge_exchange_duration_seconds", nil)

	f := newFixture(t, rules)
	up := callee(t)
	for range 3 {
		status, _ := f.call(up, "api.example.com", "metrics-user")
		require.Equal(t, http.StatusOK, status)
	}
	f.idp.set(func(te *tokenEndpoint) { te.down = true })
	status, _ := f.call(up, "api.example.com", "metrics-other-user")
	require.Equal(t, http.StatusBadGateway, status)

	assert.Equal(t, issued+1, count("issued"))
	assert.Equal(t, cached+2, count("cached"))
	assert.Equal(t, failed+1, count("failed"))
	assert.Equal(t, timed+2, m.Sum("kagenti_authbridge_exchange_duration_seconds", nil), "the issued and the failed call are timed")
}
