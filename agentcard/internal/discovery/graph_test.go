package discovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/pkg/configmap/callgraph"
)

// authbridgePod serves a Prometheus exposition on ip:port as an authbridge's inbound status port
// does, counting the reads.
func authbridgePod(t *testing.T, ip string, port int, exposition string) *atomic.Int32 {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
	require.NoError(t, err)
	reads := &atomic.Int32{}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, exposition)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return reads
}

// graphCard creates AgentCard ns/name with the status agentcard writes: the pods it fetched from,
// and a signature verified (and bound) to spiffeID when set.
func graphCard(t *testing.T, ns, name, spiffeID string, bound bool, podIPs ...string) {
	t.Helper()
	ctx := context.Background()
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
	require.NoError(t, k8s.Create(ctx, c))
	for i, ip := range podIPs {
		c.Status.Cards = append(c.Status.Cards, v1alpha1.PodCard{PodName: fmt.Sprintf("%s-%d", name, i), PodIP: ip, FetchStatus: "Success"})
	}
	if spiffeID != "" {
		c.Status.Signature = &v1alpha1.SignatureStatus{Verified: true, SpiffeID: spiffeID}
		c.Status.Binding = &v1alpha1.BindingStatus{Bound: bound, ExpectedSpiffeID: spiffeID}
	}
	require.NoError(t, k8s.Status().Update(ctx, c))
}

// grantGraph lets ServiceAccount ns/sa get agentcards/graph in ns.
func grantGraph(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "graph"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kagenti.io"}, Resources: []string{"agentcards/graph"}, Verbs: []string{"get"}}}}))
	require.NoError(t, k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "graph"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "graph"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}))
}

// graphAPI serves the discovery API's handler as the binary builds it (reviews on the real API
// server, AgentCards read from it), with the pods' status port at port.
func graphAPI(t *testing.T, port int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(&discovery.Server{
		Reader:     k8s,
		Authorizer: &discovery.KubeAuthorizer{Client: cs},
		Calls:      &discovery.MetricsScraper{Port: port, TTL: time.Hour},
	})
	t.Cleanup(srv.Close)
	return srv
}

func getGraph(t *testing.T, srv *httptest.Server, query, token string) (int, string, discovery.Graph) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/graph"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var g discovery.Graph
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(raw, &g), string(raw))
	}
	return resp.StatusCode, string(raw), g
}

// TestGraphOfTheCallsIntoANamespacesAgents: GET /v1/graph reads the calls each pod's authbridge
// counted (its inbound status port's /metrics), sums them per agent over its pods, and names a
// caller or a workload of the chain by the AgentCard whose verified and bound signing identity it
// is; a card that is verified but not bound names nobody.
func TestGraphOfTheCallsIntoANamespacesAgents(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	// Identities of this run's namespaces: the API server keeps the cards of earlier runs.
	graphCaller, graphMiddle := "spiffe://example.org/ns/"+other+"/sa/caller", "spiffe://example.org/ns/"+other+"/sa/middle"
	port := freePort(t)
	reads1 := authbridgePod(t, "127.0.0.2", port, `# TYPE kagenti_authbridge_calls_total counter
kagenti_authbridge_calls_total{caller="`+graphMiddle+`",result="allowed",via="`+graphCaller+`"} 3
kagenti_authbridge_calls_total{caller="`+graphCaller+`",result="denied",via=""} 1
`)
	authbridgePod(t, "127.0.0.3", port, `# TYPE kagenti_authbridge_calls_total counter
kagenti_authbridge_calls_total{caller="`+graphMiddle+`",result="allowed",via="`+graphCaller+`"} 2
kagenti_authbridge_calls_total{caller="`+graphMiddle+`",result="denied",via="`+graphCaller+`"} 1
# TYPE kagenti_authbridge_exchanges_total counter
kagenti_authbridge_exchanges_total{result="issued"} 9
`)
	graphCard(t, ns, "callee", "", false, "127.0.0.2", "127.0.0.3")
	graphCard(t, other, "middle", graphMiddle, true)
	graphCard(t, other, "caller", graphCaller, false) // verified, not bound: names nobody
	grantGraph(t, ns, "reader")
	srv := graphAPI(t, port)

	code, body, g := getGraph(t, srv, "?namespace="+ns+"&name=callee", token(t, ns, "reader"))
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, 2, g.Pods, body)
	assert.Empty(t, g.Unavailable)
	assert.Equal(t, []discovery.GraphAgent{{Namespace: ns, Name: "callee"}}, g.Agents)
	assert.Equal(t, []discovery.GraphEdge{
		{To: ns + "/callee", Edge: callgraph.Edge{Caller: graphCaller, Denied: 1}},
		{To: ns + "/callee", Edge: callgraph.Edge{Caller: graphMiddle, Via: []string{graphCaller}, Allowed: 5, Denied: 1},
			CallerAgent: other + "/middle", ViaAgents: []string{""}},
	}, g.Edges, body)

	// The whole namespace; the pods' answers are reused within the TTL.
	before := reads1.Load()
	code, body, g = getGraph(t, srv, "?namespace="+ns, token(t, ns, "reader"))
	require.Equal(t, http.StatusOK, code, body)
	assert.Len(t, g.Edges, 2)
	assert.Len(t, g.Agents, 2, "callee and newNamespace's weather card")
	assert.Equal(t, before, reads1.Load(), "a pod read within the TTL is not read again")
}

// TestGraphNeedsItsOwnRight: reading the cards is not enough to read who calls whom; the denial
// names the right. Without a token the answer is 401, as for the cards.
func TestGraphNeedsItsOwnRight(t *testing.T) {
	ns := newNamespace(t)
	srv := graphAPI(t, freePort(t))
	code, body, _ := getGraph(t, srv, "?namespace="+ns, token(t, ns, "reader"))
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, body, "cannot get agentcards/graph.kagenti.io in namespace")
	grantGraph(t, ns, "reader")
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _, _ := getGraph(t, srv, "?namespace="+ns, token(t, ns, "reader"))
		return code == http.StatusOK, nil // the denial is cached for a few seconds
	}))
	code, _, _ = getGraph(t, srv, "?namespace="+ns, "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, body, _ = getGraph(t, srv, "?name=callee", token(t, ns, "reader"))
	assert.Equal(t, http.StatusBadRequest, code, body)
}

// TestGraphReportsPodsItCannotRead: a pod where no authbridge listens and one that answers
// something else than metrics are reported with the reason; the others are still counted.
func TestGraphReportsPodsItCannotRead(t *testing.T) {
	ns := newNamespace(t)
	graphCaller := "spiffe://example.org/ns/" + ns + "/sa/caller"
	port := freePort(t)
	authbridgePod(t, "127.0.0.5", port, "kagenti_authbridge_calls_total{caller="+"\n")
	authbridgePod(t, "127.0.0.6", port, `kagenti_authbridge_calls_total{caller="`+graphCaller+`",result="allowed",via=""} 4
`)
	graphCard(t, ns, "callee", "", false, "127.0.0.4", "127.0.0.5", "127.0.0.6")
	grantGraph(t, ns, "reader")
	code, body, g := getGraph(t, graphAPI(t, port), "?namespace="+ns+"&name=callee", token(t, ns, "reader"))
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, 1, g.Pods)
	assert.Equal(t, []discovery.GraphEdge{{To: ns + "/callee", Edge: callgraph.Edge{Caller: graphCaller, Allowed: 4}}}, g.Edges)
	require.Len(t, g.Unavailable, 2, body)
	assert.Contains(t, g.Unavailable[0], ns+"/callee pod callee-0: no authbridge status port")
	assert.Contains(t, g.Unavailable[1], ns+"/callee pod callee-1: metrics:")
}
