package federation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
	"github.com/kagenti/platform/agentcard/internal/federation/member"
)

var scheme = k8sruntime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
}

// startClusters starts n API servers (each with its etcd) at once: n clusters on this machine.
func startClusters(t *testing.T, n int) []*rest.Config {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "../../..")
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("envtest assets missing: %v (set KUBEBUILDER_ASSETS)", err)
	}
	cfgs := make([]*rest.Config, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		env := &envtest.Environment{BinaryAssetsDirectory: assets, ErrorIfCRDPathMissing: true, ControlPlaneStartTimeout: 2 * time.Minute,
			CRDDirectoryPaths: []string{filepath.Join(root, "deploy/crds/agentcard")}}
		t.Cleanup(func() { _ = env.Stop() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfgs[i], errs[i] = env.Start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return cfgs
}

// memberCluster is a member cluster: its API server, a manager whose cache the member agent
// watches, and the agent.
type memberCluster struct {
	name   string
	domain *fedtest.Domain
	client client.Client
	agent  *fedtest.Member
	stop   func()
}

func startMember(t *testing.T, cfg *rest.Config, name string, d *fedtest.Domain, h *fedtest.Hub) *memberCluster {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	require.NoError(t, err)
	m := &memberCluster{name: name, domain: d, client: mgr.GetClient()}
	m.agent = fedtest.NewMember(t, name, d, h.Domain, h.Address)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, member.Watch(ctx, mgr.GetCache(), m.agent.Log))
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	m.stop = m.agent.Run(t)
	require.NoError(t, m.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}))
	return m
}

// publishVerified creates an AgentCard and writes the status agentcard's controller writes for a
// verified card (the member reads only that status).
func (m *memberCluster) publishVerified(t *testing.T, name string, exported bool, card []byte, signer string) {
	ctx := context.Background()
	ac := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: name},
		Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
	if exported {
		ac.Labels = map[string]string{v1alpha1.LabelExport: "true"}
	}
	err := m.client.Get(ctx, client.ObjectKeyFromObject(ac), ac)
	if err != nil {
		require.NoError(t, m.client.Create(ctx, ac))
	}
	ac.Status.ObservedGeneration = ac.Generation
	ac.Status.Card = &k8sruntime.RawExtension{Raw: card}
	ac.Status.Signature = &v1alpha1.SignatureStatus{Verified: true, SpiffeID: signer}
	ac.Status.Binding = &v1alpha1.BindingStatus{Bound: true, ExpectedSpiffeID: signer}
	meta.SetStatusCondition(&ac.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionVerified, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonVerified, ObservedGeneration: ac.Generation})
	require.NoError(t, m.client.Status().Update(ctx, ac))
}

type hubCluster struct {
	client client.Client
	hub    *fedtest.Hub
	api    *httptest.Server
}

func (h *hubCluster) agents(t *testing.T, query string) []discovery.Agent {
	resp, err := http.Get(h.api.URL + "/v1/agents?" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list discovery.AgentList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	return list.Items
}

func (h *hubCluster) agent(t *testing.T, cluster, name string) *discovery.Agent {
	for _, a := range h.agents(t, "cluster="+cluster) {
		if a.Name == name {
			return &a
		}
	}
	return nil
}

func (h *hubCluster) status(t *testing.T, name string) v1alpha1.FederatedClusterStatus {
	var fc v1alpha1.FederatedCluster
	require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: name}, &fc))
	return fc.Status
}

// TestThreeClusters runs a hub and two members, each a real API server, with the member agents
// and the hub in this process over real mutual TLS.
func TestThreeClusters(t *testing.T) {
	cfgs := startClusters(t, 3)
	hubDomain, aDomain, bDomain := fedtest.NewDomain(t, "hub.example"), fedtest.NewDomain(t, "a.example"), fedtest.NewDomain(t, "b.example")
	ctx := context.Background()

	hubClient, err := client.New(cfgs[0], client.Options{Scheme: scheme})
	require.NoError(t, err)
	regA := fedtest.Registration("a", aDomain, 3*time.Second, 6*time.Second)
	regB := fedtest.Registration("b", bDomain, 30*time.Second, 5*time.Minute)
	require.NoError(t, hubClient.Create(ctx, &regA))
	require.NoError(t, hubClient.Create(ctx, &regB))
	h := fedtest.NewHub(clock.RealClock{})
	h.Store.SetServing(true)
	writer := &hub.StatusWriter{Client: hubClient, Registry: h.Registry, Store: h.Store, Clock: clock.RealClock{}, Interval: 100 * time.Millisecond, Log: logr.Discard()}
	require.NoError(t, writer.Sync(ctx))
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = writer.Start(wctx) }()
	hc := &hubCluster{client: hubClient, hub: fedtest.StartHub(t, hubDomain, h)}
	hc.api = httptest.NewServer(&discovery.Server{Reader: hubClient, Remote: h.Store, LocalCluster: "hub"})
	t.Cleanup(hc.api.Close)

	a := startMember(t, cfgs[1], "a", aDomain, hc.hub)
	b := startMember(t, cfgs[2], "b", bDomain, hc.hub)

	t.Run("an exported card appears with its cluster, an unexported one never", func(t *testing.T) {
		secret, secretID := aDomain.SignedCard(t, "agents", "secret", "Secret", "1.0.0")
		a.publishVerified(t, "secret", false, secret, secretID)
		card, id := aDomain.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
		start := time.Now()
		a.publishVerified(t, "weather", true, card, id)
		fedtest.Eventually(t, "weather in the hub's discovery API", func() bool { return hc.agent(t, "a", "weather") != nil })
		t.Logf("verified in a → served by the hub: %s", time.Since(start))
		got := hc.agent(t, "a", "weather")
		require.Equal(t, "a", got.Cluster)
		require.True(t, got.Verified && got.Bound)
		require.Equal(t, id, got.SpiffeID)
		require.NotNil(t, got.Freshness)
		require.False(t, got.Freshness.Stale)
		require.NotNil(t, got.Freshness.HubVerifiedAt)
		require.Nil(t, hc.agent(t, "a", "secret"), "an unexported card never reaches the hub")
		fedtest.Eventually(t, "FederatedCluster a counts the card", func() bool {
			st := hc.status(t, "a")
			return st.Cards == 1 && meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionConnected) && meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionFederatedReady)
		})
		require.Equal(t, "spiffe://a.example"+fedtest.AgentPath, hc.status(t, "a").PeerSpiffeID)
	})

	t.Run("a change in a propagates", func(t *testing.T) {
		card, id := aDomain.SignedCard(t, "agents", "weather", "Weather", "2.0.0")
		a.publishVerified(t, "weather", true, card, id)
		fedtest.Eventually(t, "version 2 at the hub", func() bool {
			got := hc.agent(t, "a", "weather")
			return got != nil && got.Version == "2.0.0"
		})
	})

	t.Run("a card signed outside a's trust domain is refused with a reason", func(t *testing.T) {
		evil := fedtest.NewDomain(t, "evil.example")
		card, id := evil.SignedCard(t, "agents", "forged", "Forged", "1.0.0")
		a.publishVerified(t, "forged", true, card, id)
		fedtest.Eventually(t, "a's status names the refusal", func() bool {
			st := hc.status(t, "a")
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionCardsAccepted)
			return st.RefusedCards == 1 && c != nil && c.Reason == v1alpha1.ReasonCardRefused && len(st.Refusals) == 1 &&
				st.Refusals[0].Reason == v1alpha1.ReasonSignerOutsideTrustDomain && st.Refusals[0].Name == "forged"
		})
		require.Nil(t, hc.agent(t, "a", "forged"))
	})

	t.Run("member b cannot publish a's agents", func(t *testing.T) {
		card, id := aDomain.SignedCard(t, "agents", "weather", "Weather", "2.0.0")
		b.publishVerified(t, "weather", true, card, id)
		fedtest.Eventually(t, "b's status names the refusal", func() bool {
			st := hc.status(t, "b")
			return st.RefusedCards == 1 && len(st.Refusals) == 1 && st.Refusals[0].Reason == v1alpha1.ReasonSignerOutsideTrustDomain
		})
		require.Nil(t, hc.agent(t, "b", "weather"))
		require.NotNil(t, hc.agent(t, "a", "weather"))
		require.Len(t, hc.agents(t, "cluster=b"), 0)
	})

	t.Run("the hub's own cards carry its cluster", func(t *testing.T) {
		require.NoError(t, hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}))
		require.NoError(t, hubClient.Create(ctx, &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "local"},
			Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "local"}}}}))
		all := hc.agents(t, "")
		var keys []string
		for _, x := range all {
			keys = append(keys, x.Cluster+"/"+x.Namespace+"/"+x.Name)
		}
		require.Equal(t, []string{"a/agents/weather", "hub/agents/local"}, keys)
		require.Len(t, hc.agents(t, "cluster=hub"), 1)
	})

	t.Run("a silent member's cards go stale after the TTL and are withdrawn after the grace", func(t *testing.T) {
		a.stop()
		fedtest.Eventually(t, "a stale", func() bool {
			st := hc.status(t, "a")
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFederatedReady)
			return c != nil && c.Reason == v1alpha1.ReasonStale && st.StaleCards == 1
		})
		got := hc.agent(t, "a", "weather")
		require.NotNil(t, got, "a stale card is still served")
		require.True(t, got.Freshness.Stale)
		require.False(t, got.Ready)
		fedtest.Eventually(t, "a withdrawn", func() bool {
			c := meta.FindStatusCondition(hc.status(t, "a").Conditions, v1alpha1.ConditionFederatedReady)
			return c != nil && c.Reason == v1alpha1.ReasonWithdrawn
		})
		require.Nil(t, hc.agent(t, "a", "weather"))
		require.NotNil(t, hc.agent(t, "hub", "local"), "other clusters unaffected")
	})

	t.Run("a restarted member republishes", func(t *testing.T) {
		a.stop = a.agent.Run(t)
		fedtest.Eventually(t, "weather back", func() bool { return hc.agent(t, "a", "weather") != nil })
		fedtest.Eventually(t, "a ready", func() bool {
			return meta.IsStatusConditionTrue(hc.status(t, "a").Conditions, v1alpha1.ConditionFederatedReady)
		})
	})
}

// TestFederatedClusterValidation checks the CRD's schema and CEL rules on a real API server.
func TestFederatedClusterValidation(t *testing.T) {
	cfg := startClusters(t, 1)[0]
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	valid := func() *v1alpha1.FederatedCluster {
		return &v1alpha1.FederatedCluster{ObjectMeta: metav1.ObjectMeta{GenerateName: "m-"},
			Spec: v1alpha1.FederatedClusterSpec{TrustDomain: "a.example", TrustBundle: "-----BEGIN CERTIFICATE-----"}}
	}
	require.NoError(t, c.Create(context.Background(), valid()))
	for _, tc := range []struct {
		name, want string
		mutate     func(*v1alpha1.FederatedCluster)
	}{
		{"trust domain with upper case", "spec.trustDomain", func(f *v1alpha1.FederatedCluster) { f.Spec.TrustDomain = "A.example" }},
		{"no trust bundle", "spec.trustBundle", func(f *v1alpha1.FederatedCluster) { f.Spec.TrustBundle = "" }},
		{"agent identity of another trust domain", "agentSpiffeID must be an identity of spec.trustDomain", func(f *v1alpha1.FederatedCluster) {
			f.Spec.AgentSpiffeID = "spiffe://b.example/ns/kagenti-system/sa/kagenti-agentcard"
		}},
		{"ttl below 3s", "ttl must be at least 3s", func(f *v1alpha1.FederatedCluster) { f.Spec.TTL = &metav1.Duration{Duration: time.Second} }},
		{"grace below ttl", "gracePeriod must be at least ttl", func(f *v1alpha1.FederatedCluster) {
			f.Spec.TTL, f.Spec.GracePeriod = &metav1.Duration{Duration: time.Minute}, &metav1.Duration{Duration: 30 * time.Second}
		}},
		{"maxCards 0", "spec.maxCards", func(f *v1alpha1.FederatedCluster) { f.Spec.MaxCards = ptr.To[int32](0) }},
		{"bundle endpoint over http", "spec.bundleEndpoint.url: Invalid value: \"http://spire.a.example:8443\": url must be an https:// URL", func(f *v1alpha1.FederatedCluster) {
			f.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: "http://spire.a.example:8443", SPIFFEID: "spiffe://a.example/spire/server"}
		}},
		{"https_spiffe without spiffeID", "spec.bundleEndpoint: Invalid value: spiffeID is required with profile https_spiffe", func(f *v1alpha1.FederatedCluster) {
			f.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: "https://spire.a.example:8443"}
		}},
		{"bundle endpoint of another trust domain", "bundleEndpoint.spiffeID must be an identity of spec.trustDomain", func(f *v1alpha1.FederatedCluster) {
			f.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: "https://spire.a.example:8443", SPIFFEID: "spiffe://b.example/spire/server"}
		}},
		{"refresh every 5s", "refreshInterval must be at least 30s", func(f *v1alpha1.FederatedCluster) {
			f.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: "https://spire.a.example:8443", SPIFFEID: "spiffe://a.example/spire/server",
				RefreshInterval: &metav1.Duration{Duration: 5 * time.Second}}
		}},
		{"unknown profile", "spec.bundleEndpoint.profile", func(f *v1alpha1.FederatedCluster) {
			f.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: "https://spire.a.example:8443", Profile: "https_jwks"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := valid()
			tc.mutate(f)
			err := c.Create(context.Background(), f)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), fmt.Sprintf("%v does not name %q", err, tc.want))
		})
	}

	// The fetched bundle survives the API server (its schema would prune an unknown field), and
	// the defaults fill in.
	f := valid()
	f.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: "https://spire.a.example:8443", SPIFFEID: "spiffe://a.example/spire/server"}
	require.NoError(t, c.Create(context.Background(), f))
	assert.Equal(t, v1alpha1.BundleProfileSPIFFE, f.Spec.BundleEndpoint.Profile)
	assert.Equal(t, 5*time.Minute, f.Spec.BundleEndpoint.RefreshInterval.Duration)
	seq := int64(7)
	f.Status.TrustBundle = &v1alpha1.FederatedTrustBundle{Seed: strings.Repeat("a", 64), RefreshedAt: metav1.NewTime(time.Now().Truncate(time.Second)),
		SequenceNumber: &seq, Authorities: 2, Bundle: `{"keys":[]}`}
	require.NoError(t, c.Status().Update(context.Background(), f))
	var got v1alpha1.FederatedCluster
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(f), &got))
	require.NotNil(t, got.Status.TrustBundle)
	assert.Equal(t, *f.Status.TrustBundle.SequenceNumber, *got.Status.TrustBundle.SequenceNumber)
	assert.Equal(t, f.Status.TrustBundle.Bundle, got.Status.TrustBundle.Bundle)
	assert.Equal(t, f.Status.TrustBundle.Seed, got.Status.TrustBundle.Seed)
}
