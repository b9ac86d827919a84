package callgraph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	caller = "spiffe://example.org/ns/team-a/sa/caller"
	middle = "spiffe://example.org/ns/team-a/sa/middle"
	first  = "spiffe://example.org/ns/team-b/sa/planner"
)

// TestParseReadsTheCallsSeriesOnly: the calls counter's series become edges, the chain split into
// the workloads it came through (the caller's caller first), the other metrics ignored.
func TestParseReadsTheCallsSeriesOnly(t *testing.T) {
	edges, err := Parse([]byte(`# TYPE kagenti_authbridge_calls_total counter
kagenti_authbridge_calls_total{caller="` + middle + `",result="allowed",via="` + caller + `,` + first + `"} 3
kagenti_authbridge_calls_total{caller="` + middle + `",result="denied",via="` + caller + `,` + first + `"} 1
kagenti_authbridge_calls_total{caller="` + caller + `",result="denied",via=""} 2
# TYPE kagenti_authbridge_exchanges_total counter
kagenti_authbridge_exchanges_total{result="issued"} 7
`))
	require.NoError(t, err)
	assert.Equal(t, []Edge{
		{Caller: caller, Denied: 2},
		{Caller: middle, Via: []string{caller, first}, Allowed: 3, Denied: 1},
	}, edges)

	untyped, err := Parse([]byte(`kagenti_authbridge_calls_total{caller="` + caller + `",result="allowed",via=""} 4` + "\n"))
	require.NoError(t, err)
	assert.Equal(t, []Edge{{Caller: caller, Allowed: 4}}, untyped, "without its # TYPE line the series is untyped, and still counted")

	none, err := Parse([]byte("# TYPE kagenti_authbridge_exchanges_total counter\nkagenti_authbridge_exchanges_total{result=\"issued\"} 7\n"))
	require.NoError(t, err)
	assert.Empty(t, none, "an authbridge that counted no call")
}

// TestParseRefusesWhatIsNotTheTextFormat: a body that is not a Prometheus text exposition (an
// HTML error page, a truncated line) is an error, not an empty graph.
func TestParseRefusesWhatIsNotTheTextFormat(t *testing.T) {
	for _, body := range []string{"kagenti_authbridge_calls_total{caller= 3\n", "<html>502 Bad Gateway</html>\n"} {
		_, err := Parse([]byte(body))
		assert.Error(t, err, body)
	}
}

// TestEdgesSumPodsByCallerAndChain: the same caller through the same chain, counted by two pods,
// is one edge; another chain is another edge.
func TestEdgesSumPodsByCallerAndChain(t *testing.T) {
	var sum Edges
	sum.Add(Edge{Caller: middle, Via: []string{caller}, Allowed: 3}, Edge{Caller: caller, Denied: 1})
	sum.Add(Edge{Caller: middle, Via: []string{caller}, Allowed: 2, Denied: 1}, Edge{Caller: middle, Allowed: 4})
	assert.Equal(t, []Edge{
		{Caller: caller, Denied: 1},
		{Caller: middle, Allowed: 4},
		{Caller: middle, Via: []string{caller}, Allowed: 5, Denied: 1},
	}, sum.List())
	var empty Edges
	assert.Empty(t, empty.List())
}
