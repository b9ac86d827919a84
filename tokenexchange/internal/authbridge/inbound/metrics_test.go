package inbound

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/pkg/configmap/callgraph"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
)

// scrape reads the status port's /metrics with Prometheus' own text parser and returns the value
// of name for the series whose labels include labels (0 when there is none).
func scrape(t *testing.T, cfg *sidecar.Config, name string, labels map[string]string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	sidecar.AdminHandler("inbound", cfg, nil, nil, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	require.NoError(t, err, "the Prometheus text parser reads /metrics")
	list := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		list = append(list, f)
	}
	return telemetry.SumOf(list, name, labels)
}

// TestDecisionsAndCallsAreMetrics: every decision is counted by result and rule, with its time,
// and every call with a valid token by its caller and delegation chain (the delegation graph's
// edges), on the status port's /metrics, read by Prometheus' parser. No token, subject or scope
// is a label.
func TestDecisionsAndCallsAreMetrics(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(onlyThroughMiddle)
	m := func(name string, labels map[string]string) float64 { return scrape(t, f.cfg, name, labels) }
	before := map[string]float64{
		"allow":   m("kagenti_authbridge_decisions_total", map[string]string{"result": "allow", "rule": "only-through-middle"}),
		"deny":    m("kagenti_authbridge_decisions_total", map[string]string{"result": "deny", "rule": "default"}),
		"timed":   m("kagenti_authbridge_decision_duration_seconds", nil),
		"edge":    m("kagenti_authbridge_calls_total", map[string]string{"caller": middle, "via": caller, "result": "allowed"}),
		"direct":  m("kagenti_authbridge_calls_total", map[string]string{"caller": caller, "via": "", "result": "denied"}),
		"noToken": m("kagenti_authbridge_inbound_requests_total", map[string]string{"result": "unauthorized"}),
	}

	require.Equal(t, http.StatusOK, f.get("/tasks", f.viaMiddle(), nil).status)
	require.Equal(t, http.StatusForbidden, f.get("/tasks", f.direct(), nil).status)
	require.Equal(t, http.StatusUnauthorized, f.get("/tasks", "", nil).status)

	assert.Equal(t, before["allow"]+1, m("kagenti_authbridge_decisions_total", map[string]string{"result": "allow", "rule": "only-through-middle"}))
	assert.Equal(t, before["deny"]+1, m("kagenti_authbridge_decisions_total", map[string]string{"result": "deny", "rule": "default"}))
	assert.Equal(t, before["timed"]+2, m("kagenti_authbridge_decision_duration_seconds", nil))
	assert.Equal(t, before["edge"]+1, m("kagenti_authbridge_calls_total", map[string]string{"caller": middle, "via": caller, "result": "allowed"}),
		"the edge middle ← caller, allowed")
	assert.Equal(t, before["direct"]+1, m("kagenti_authbridge_calls_total", map[string]string{"caller": caller, "via": "", "result": "denied"}))
	assert.Equal(t, before["noToken"]+1, m("kagenti_authbridge_inbound_requests_total", map[string]string{"result": "unauthorized"}))

	rec := httptest.NewRecorder()
	sidecar.AdminHandler("inbound", f.cfg, nil, nil, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.NotContains(t, rec.Body.String(), "user-1", "no subject in a label")
	assert.NotContains(t, rec.Body.String(), "agent:invoke", "no scope in a label")

	// The readers of the graph (kagenti describe, agentcard's /v1/graph) parse these series with
	// callgraph.Parse: the same edges, the chain as a list.
	edges, err := callgraph.Parse(rec.Body.Bytes())
	require.NoError(t, err)
	edge := func(caller string, via ...string) callgraph.Edge {
		for _, e := range edges {
			if e.Caller == caller && slices.Equal(e.Via, via) {
				return e
			}
		}
		return callgraph.Edge{}
	}
	assert.Equal(t, before["edge"]+1, edge(middle, caller).Allowed)
	assert.Equal(t, before["direct"]+1, edge(caller).Denied)
}
