package describe

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kagenti/platform/pkg/configmap/callgraph"
)

const (
	middle = "spiffe://cluster.local/ns/agents/sa/middle"
	caller = "spiffe://cluster.local/ns/agents/sa/caller"
)

// TestDescribeShowsTheEffectivePolicy: the TokenExchange's rules in order, and the default as the
// data plane applies it (Deny once a rule allows).
func TestDescribeShowsTheEffectivePolicy(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"kind": "TokenExchange", "metadata": map[string]any{"name": "callee-auth"},
		"spec": map[string]any{"inbound": map[string]any{"authorization": map[string]any{
			"maxChainDepth": int64(3),
			"rules": []any{
				map[string]any{"name": "no-guests", "effect": "Deny", "when": `"/guests" in groups`},
				map[string]any{"name": "only-through-middle", "effect": "Allow", "when": `caller == "` + middle + `"`},
			}}}},
		"status": map[string]any{"delegation": "chained"},
	}}
	r := &Report{now: time.Now(), Workload: Workload{Kind: "Deployment", Namespace: "agents", Name: "callee"}}
	r.add(u, "callee", nil)
	require.NotNil(t, r.Authorization)
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	assert.Contains(t, b.String(), "Authorization (TokenExchange callee-auth): default Deny (an Allow rule exists), delegation chained, chains of at most 3\n"+
		"  Deny no-guests: \"/guests\" in groups\n"+
		"  Allow only-through-middle: caller == \""+middle+"\"\n")

	u.Object["spec"] = map[string]any{"inbound": map[string]any{"authorization": map[string]any{"dryRun": true,
		"rules": []any{map[string]any{"name": "no-guests", "effect": "Deny", "when": "true"}}}}}
	r = &Report{now: time.Now()}
	r.add(u, "callee", nil)
	assert.Equal(t, "Allow", r.Authorization.Default, "deny rules only: what no rule denies is allowed")
	assert.True(t, r.Authorization.DryRun)

	u.Object["spec"] = map[string]any{}
	r = &Report{now: time.Now()}
	r.add(u, "callee", nil)
	assert.Nil(t, r.Authorization, "no policy: no section")
}

// TestDescribeShowsTheEgressPolicy: the outbound allow-list in order, each rule as the data plane
// matches it (an agent by its Service, in the TokenExchange's namespace unless named), and the
// default (Allow unless the spec says Deny).
func TestDescribeShowsTheEgressPolicy(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"kind": "TokenExchange", "metadata": map[string]any{"name": "caller-auth", "namespace": "agents"},
		"spec": map[string]any{"outbound": map[string]any{"egress": map[string]any{"default": "Deny",
			"allow": []any{
				map[string]any{"host": "api.example.com", "ports": []any{int64(443)}},
				map[string]any{"agent": map[string]any{"name": "weather"}},
				map[string]any{"agent": map[string]any{"name": "search", "namespace": "tools"}, "ports": []any{int64(8080), int64(8443)}},
				map[string]any{"cidr": "10.96.0.0/12"},
			}}}},
	}}
	r := &Report{now: time.Now(), Workload: Workload{Kind: "Deployment", Namespace: "agents", Name: "caller"}}
	r.add(u, "caller", nil)
	require.NotNil(t, r.Egress)
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	assert.Contains(t, b.String(), "Egress (TokenExchange caller-auth): default Deny\n"+
		"  allow host api.example.com ports 443\n"+
		"  allow agent weather.agents\n"+
		"  allow agent search.tools ports 8080,8443\n"+
		"  allow cidr 10.96.0.0/12\n")

	u.Object["spec"] = map[string]any{"outbound": map[string]any{"egress": map[string]any{"dryRun": true}}}
	r = &Report{now: time.Now()}
	r.add(u, "caller", nil)
	assert.Equal(t, &Egress{TokenExchange: "caller-auth", Default: "Allow", DryRun: true}, r.Egress)

	u.Object["spec"] = map[string]any{}
	r = &Report{now: time.Now()}
	r.add(u, "caller", nil)
	assert.Nil(t, r.Egress, "no policy: no section")
}

// TestDelegationGraphFromThePodsMetrics: the pods' kagenti_authbridge_calls_total series (the
// authbridge's /metrics, Prometheus text format) become one edge per caller and chain, summed
// over the pods.
func TestDelegationGraphFromThePodsMetrics(t *testing.T) {
	pod1 := []byte(`# HELP kagenti_authbridge_calls_total Inbound calls.
# TYPE kagenti_authbridge_calls_total counter
kagenti_authbridge_calls_total{caller="` + middle + `",result="allowed",via="` + caller + `"} 3
kagenti_authbridge_calls_total{caller="` + caller + `",result="denied",via=""} 1
# TYPE kagenti_authbridge_exchanges_total counter
kagenti_authbridge_exchanges_total{result="issued"} 7
`)
	pod2 := []byte(`# TYPE kagenti_authbridge_calls_total counter
kagenti_authbridge_calls_total{caller="` + middle + `",result="allowed",via="` + caller + `"} 2
kagenti_authbridge_calls_total{caller="` + middle + `",result="denied",via="` + caller + `"} 1
`)
	var edges callgraph.Edges
	for _, exposition := range [][]byte{pod1, pod2} {
		calls, err := callgraph.Parse(exposition)
		require.NoError(t, err)
		edges.Add(calls...)
	}
	_, err := callgraph.Parse([]byte("kagenti_authbridge_calls_total{caller= 3\n"))
	require.Error(t, err, "not the text format")

	r := &Report{now: time.Now(), Graph: &Graph{Pods: 2, Unavailable: []string{"callee-3: pods \"callee-3\" is forbidden"}}}
	r.Graph.Edges = edges.List()
	assert.Equal(t, []callgraph.Edge{{Caller: caller, Denied: 1}, {Caller: middle, Via: []string{caller}, Allowed: 5, Denied: 1}}, r.Graph.Edges)
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	assert.Contains(t, b.String(), "Calls into it (delegation graph, counted by 2 pod(s)' authbridge):\n")
	assert.Contains(t, b.String(), "  "+middle+" ← "+caller+": 5 allowed, 1 denied\n")
	assert.Contains(t, b.String(), "  not read: callee-3: pods \"callee-3\" is forbidden\n")

	r.Graph = &Graph{Unavailable: []string{"a: refused", "b: refused"}}
	b.Reset()
	require.NoError(t, r.WriteText(&b))
	assert.Contains(t, b.String(), "\nCalls into it: not read from any of 2 pod(s) (-o json has the errors)\n")
}
