package cardsync

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// Pods serving the same card body hold one copy of it and share one signature verification;
// each pod still gets its own identity binding.
func TestPodsServingOneCardShareOneVerifiedCopy(t *testing.T) {
	ca, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(t, err)
	id := "spiffe://cluster.local/ns/shared/sa/agent"
	svid, err := ca.NewSVID(id, devca.SVIDOptions{})
	require.NoError(t, err)
	body, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: svid.Key, Chain: svid.Chain})
	require.NoError(t, err)
	bundle, err := signature.ParseBundle(spiffeid.RequireTrustDomainFromString("cluster.local"), devca.CertPEM(ca.Cert))
	require.NoError(t, err)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	host, portStr, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)

	trust := &verify.TrustStore{}
	trust.Set(bundle, nil)
	r := NewSyncer(fetch.New(4, 5*time.Second), trust, signature.IdentityRules{}, "", 1<<20)
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "agent"},
		Spec: v1alpha1.AgentCardSpec{Endpoint: &v1alpha1.Endpoint{Port: int32(port), Path: "/card"}}}

	states := make([]*PodState, 3)
	for i := range states {
		p := &podcache.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "agent-" + strconv.Itoa(i), UID: types.UID("uid-" + strconv.Itoa(i))},
			ServiceAccount: "agent", IP: host, Serving: true}
		states[i] = &PodState{}
		r.syncPod(context.Background(), states[i], syncInput{card: c, pod: p, trustDomain: "cluster.local", requireSig: true})
		require.Equal(t, v1alpha1.FetchSuccess, states[i].fetchStatus, states[i].errMsg)
		assert.True(t, states[i].verified(), "pod %d: %+v %+v", i, states[i].verify, states[i].binding)
	}
	assert.Equal(t, 1, r.cards.parses, "three pods with one card: one parse")
	assert.Equal(t, 1, r.cards.verifications, "three pods with one card: one signature verification")
	assert.Len(t, r.cards.entries, 1, "three pods with one card: one copy")
	for _, st := range states[1:] {
		assert.Same(t, states[0].card, st.card, "the pods share the card's summary and bytes")
	}

	// A new bundle: the card is verified again, once.
	other, err := signature.ParseBundle(spiffeid.RequireTrustDomainFromString("cluster.local"), devca.CertPEM(ca.Cert))
	require.NoError(t, err)
	other.Hash = "rotated"
	trust.Set(other, nil)
	for i, st := range states {
		p := &podcache.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "agent-" + strconv.Itoa(i), UID: types.UID("uid-" + strconv.Itoa(i))},
			ServiceAccount: "agent", IP: host, Serving: true}
		r.syncPod(context.Background(), st, syncInput{card: c, pod: p, trustDomain: "cluster.local", requireSig: true})
		assert.True(t, st.verified())
	}
	assert.Equal(t, 2, r.cards.verifications, "a rotated bundle: one more verification for all three pods")
}

// BenchmarkFirstSyncOfPodsServingOneCard is the first sync of 100 pods serving the same signed
// card (a Deployment's replicas): every fetch is a full 200 answer.
//
//	go test -run '^$' -bench FirstSyncOfPodsServingOneCard -benchmem ./agentcard/internal/cardsync/
func BenchmarkFirstSyncOfPodsServingOneCard(b *testing.B) {
	const pods = 100
	ca, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(b, err)
	id := "spiffe://cluster.local/ns/shared/sa/agent"
	svid, err := ca.NewSVID(id, devca.SVIDOptions{})
	require.NoError(b, err)
	body, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: svid.Key, Chain: svid.Chain})
	require.NoError(b, err)
	bundle, err := signature.ParseBundle(spiffeid.RequireTrustDomainFromString("cluster.local"), devca.CertPEM(ca.Cert))
	require.NoError(b, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	host, portStr, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(b, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(b, err)
	trust := &verify.TrustStore{}
	trust.Set(bundle, nil)
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "agent"},
		Spec: v1alpha1.AgentCardSpec{Endpoint: &v1alpha1.Endpoint{Port: int32(port), Path: "/card"}}}
	podList := make([]*podcache.Pod, pods)
	for i := range podList {
		podList[i] = &podcache.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "agent-" + strconv.Itoa(i), UID: types.UID("uid-" + strconv.Itoa(i))},
			ServiceAccount: "agent", IP: host, Serving: true}
	}
	b.ReportAllocs()
	for b.Loop() {
		r := NewSyncer(fetch.New(4, 5*time.Second), trust, signature.IdentityRules{}, "", 1<<20)
		for _, p := range podList {
			st := &PodState{}
			r.syncPod(context.Background(), st, syncInput{card: c, pod: p, trustDomain: "cluster.local", requireSig: true})
			if !st.verified() {
				b.Fatalf("%+v %+v", st.verify, st.binding)
			}
		}
	}
}
