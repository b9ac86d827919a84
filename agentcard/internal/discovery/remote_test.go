package discovery_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

type fakeCatalog struct {
	cards   []discovery.RemoteCard
	serving bool
}

func (f *fakeCatalog) RemoteCards(cluster, namespace string) []discovery.RemoteCard {
	var out []discovery.RemoteCard
	for _, c := range f.cards {
		if (cluster == "" || c.Cluster == cluster) && (namespace == "" || c.Namespace == namespace) {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeCatalog) RemoteCard(cluster, namespace, name string) (discovery.RemoteCard, bool) {
	for _, c := range f.cards {
		if c.Cluster == cluster && c.Namespace == namespace && c.Name == name {
			return c, true
		}
	}
	return discovery.RemoteCard{}, false
}

func (f *fakeCatalog) Serving() bool { return f.serving }

func getJSON(t *testing.T, url string, want int, into any) {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, want, resp.StatusCode)
	if into != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(into))
	}
}

func TestHubServesEveryClusterWithItsClusterAndFilter(t *testing.T) {
	local := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "local"}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(local).Build()
	cat := &fakeCatalog{serving: true, cards: []discovery.RemoteCard{
		{Cluster: "a", Namespace: "agents", Name: "weather", Card: testcards.Weather("1.0.0"), SpiffeID: "spiffe://a/ns/agents/sa/w", LastSeen: time.Now(), VerifiedAt: time.Now()},
		{Cluster: "b", Namespace: "tools", Name: "search", Card: testcards.Named("Search", "1.0.0"), Stale: true},
	}}
	srv := httptest.NewServer(&discovery.Server{Reader: reader, Remote: cat, LocalCluster: "hub"})
	defer srv.Close()

	var all discovery.AgentList
	getJSON(t, srv.URL+"/v1/agents", http.StatusOK, &all)
	var keys []string
	for _, a := range all.Items {
		keys = append(keys, a.Cluster+"/"+a.Namespace+"/"+a.Name)
	}
	require.Equal(t, []string{"a/agents/weather", "b/tools/search", "hub/agents/local"}, keys)
	require.Equal(t, "Weather Intelligence Agent", all.Items[0].AgentName)
	require.True(t, all.Items[0].Verified && all.Items[0].Ready)
	require.True(t, all.Items[1].Freshness.Stale)
	require.False(t, all.Items[1].Ready, "a stale card is not ready")

	var onlyA discovery.AgentList
	getJSON(t, srv.URL+"/v1/agents?cluster=a", http.StatusOK, &onlyA)
	require.Len(t, onlyA.Items, 1)
	var onlyHub discovery.AgentList
	getJSON(t, srv.URL+"/v1/agents?cluster=hub", http.StatusOK, &onlyHub)
	require.Len(t, onlyHub.Items, 1)
	require.Equal(t, "local", onlyHub.Items[0].Name)

	var page discovery.AgentList
	getJSON(t, srv.URL+"/v1/agents?limit=2", http.StatusOK, &page)
	require.Len(t, page.Items, 2)
	var rest discovery.AgentList
	getJSON(t, srv.URL+"/v1/agents?limit=2&continue="+page.Continue, http.StatusOK, &rest)
	require.Len(t, rest.Items, 1)
	require.Equal(t, "hub", rest.Items[0].Cluster)

	var one discovery.Agent
	getJSON(t, srv.URL+"/v1/agents/agents/weather?cluster=a", http.StatusOK, &one)
	require.Equal(t, "a", one.Cluster)
	require.NotEmpty(t, one.Card)
	getJSON(t, srv.URL+"/v1/agents/agents/weather?cluster=b", http.StatusNotFound, nil)
}

func TestHubFollowerRefusesMemberCardsButServesItsOwn(t *testing.T) {
	reader := fake.NewClientBuilder().WithScheme(scheme).Build()
	srv := httptest.NewServer(&discovery.Server{Reader: reader, Remote: &fakeCatalog{}, LocalCluster: "hub"})
	defer srv.Close()
	getJSON(t, srv.URL+"/v1/agents", http.StatusServiceUnavailable, nil)
	getJSON(t, srv.URL+"/v1/agents?cluster=a", http.StatusServiceUnavailable, nil)
	getJSON(t, srv.URL+"/v1/agents/agents/x?cluster=a", http.StatusServiceUnavailable, nil)
	getJSON(t, srv.URL+"/v1/agents?cluster=hub", http.StatusOK, nil)
}

func TestWithoutFederationEntriesCarryNoCluster(t *testing.T) {
	local := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "local"}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(local).Build()
	srv := httptest.NewServer(&discovery.Server{Reader: reader})
	defer srv.Close()
	var all discovery.AgentList
	getJSON(t, srv.URL+"/v1/agents", http.StatusOK, &all)
	require.Len(t, all.Items, 1)
	require.Empty(t, all.Items[0].Cluster)
	require.Nil(t, all.Items[0].Freshness)
}
