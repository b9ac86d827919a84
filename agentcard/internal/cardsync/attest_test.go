package cardsync

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/fetch/sidecartest"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// TestAttestedFetchIsInThePodsResult: an AgentCard served over https by a pod whose SVID is the
// identity its card is bound to is fetched over mutual TLS (fetchedOver mtls, the proved SPIFFE
// ID in the pod's entry), and its signature is still verified; a pod of the same AgentCard that
// proves another identity is a failed fetch with reason PeerNotAttested.
func TestAttestedFetchIsInThePodsResult(t *testing.T) {
	ca, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(t, err)
	td := spiffeid.RequireTrustDomainFromString("cluster.local")
	x509Bundle := x509bundle.FromX509Authorities(td, []*x509.Certificate{ca.Cert})
	newSVID := func(id string) *x509svid.SVID {
		s, err := ca.NewSVID(id, devca.SVIDOptions{})
		require.NoError(t, err)
		return &x509svid.SVID{ID: spiffeid.RequireFromString(id), Certificates: s.Chain, PrivateKey: s.Key}
	}
	agentID := "spiffe://cluster.local/ns/agents/sa/weather"
	signer := newSVID(agentID)
	body, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: signer.PrivateKey, Chain: signer.Certificates})
	require.NoError(t, err)
	serve := func(svid *x509svid.SVID) (string, int32) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			_ = srv.Serve(tls.NewListener(ln, tlsconfig.MTLSServerConfig(tlsid.NewStatic(svid), x509Bundle, tlsconfig.AuthorizeAny())))
		}()
		t.Cleanup(func() { _ = srv.Close() })
		host, p, _ := net.SplitHostPort(ln.Addr().String())
		n, _ := strconv.Atoi(p)
		return host, int32(n)
	}
	bundle, err := signature.ParseBundle(td, devca.CertPEM(ca.Cert))
	require.NoError(t, err)
	trust := &verify.TrustStore{}
	trust.Set(bundle, nil)
	fetcher := fetch.New(4, 5*time.Second).WithAttestation(&fetch.Attestation{
		SVID: tlsid.NewStatic(newSVID("spiffe://cluster.local/ns/kagenti-system/sa/kagenti-agentcard")), Bundles: x509Bundle})
	r := NewSyncer(fetcher, trust, signature.IdentityRules{}, "cluster.local", 1<<20)

	sync := func(svid *x509svid.SVID, name string) *PodState {
		host, port := serve(svid)
		c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "weather"},
			Spec: v1alpha1.AgentCardSpec{Endpoint: &v1alpha1.Endpoint{Port: port, Path: "/card", Scheme: "https"}}}
		p := &podcache.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: name, UID: types.UID(name)}, ServiceAccount: "weather", IP: host, Serving: true}
		st := &PodState{}
		r.syncPod(context.Background(), st, syncInput{card: c, pod: p, trustDomain: "cluster.local", requireSig: true})
		return st
	}

	st := sync(newSVID(agentID), "weather-0")
	require.Equal(t, v1alpha1.FetchSuccess, st.fetchStatus, st.errMsg)
	assert.True(t, st.verified(), "the signature check stays: %+v %+v", st.verify, st.binding)
	res := Results([]Served{{Pod: &podcache.Pod{ObjectMeta: metav1.ObjectMeta{Name: "weather-0"}}, State: st}})[0]
	assert.Equal(t, fetch.OverMTLS, res.Over)
	assert.Equal(t, agentID, res.PeerID)

	st = sync(newSVID("spiffe://cluster.local/ns/agents/sa/impostor"), "weather-1")
	assert.Equal(t, v1alpha1.FetchFailed, st.fetchStatus)
	assert.Equal(t, v1alpha1.ReasonPeerNotAttested, st.reason)
	assert.Contains(t, st.errMsg, "did not prove it is "+agentID)
	assert.Empty(t, st.over)
}

// TestAttestedFetchOfAStrictSidecarIsInTheStatus: an AgentCard that names no endpoint (as an
// auto-created one) for a pod whose kagenti-authbridge inbound runs mtls.mode strict: the plain
// fetch is answered 426, the card is fetched again over mutual TLS from the pod proving its
// workload identity, its signature is verified, and status.cards[] says fetchedOver mtls with the
// proved SPIFFE ID.
func TestAttestedFetchOfAStrictSidecarIsInTheStatus(t *testing.T) {
	ca, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(t, err)
	td := spiffeid.RequireTrustDomainFromString("cluster.local")
	x509Bundle := x509bundle.FromX509Authorities(td, []*x509.Certificate{ca.Cert})
	newSVID := func(id string) *x509svid.SVID {
		s, err := ca.NewSVID(id, devca.SVIDOptions{})
		require.NoError(t, err)
		return &x509svid.SVID{ID: spiffeid.RequireFromString(id), Certificates: s.Chain, PrivateKey: s.Key}
	}
	agentID := "spiffe://cluster.local/ns/agents/sa/weather"
	workload := newSVID(agentID)
	body, err := signature.Sign(testcards.Weather("1.0.0"), signature.SignOptions{Key: workload.PrivateKey, Chain: workload.Certificates})
	require.NoError(t, err)
	sc := sidecartest.Serve(t, true, workload, x509Bundle, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != fetch.PathAgentCard {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	bundle, err := signature.ParseBundle(td, devca.CertPEM(ca.Cert))
	require.NoError(t, err)
	trust := &verify.TrustStore{}
	trust.Set(bundle, nil)
	controller := "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-agentcard"
	fetcher := fetch.New(4, 5*time.Second).WithAttestation(&fetch.Attestation{SVID: tlsid.NewStatic(newSVID(controller)), Bundles: x509Bundle})
	r := NewSyncer(fetcher, trust, signature.IdentityRules{}, "cluster.local", 1<<20)

	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "weather"}}
	p := &podcache.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "weather-0", UID: "weather-0"},
		ServiceAccount: "weather", IP: "127.0.0.1", Serving: true, CardPort: sc.Port}
	st := &PodState{}
	r.syncPod(context.Background(), st, syncInput{card: c, pod: p, trustDomain: "cluster.local", requireSig: true})
	require.Equal(t, v1alpha1.FetchSuccess, st.fetchStatus, st.errMsg)
	assert.True(t, st.verified(), "the signature check stays: %+v %+v", st.verify, st.binding)
	assert.Equal(t, []string{controller}, sc.Peers())

	got := status.Build(c, Results([]Served{{Pod: p, State: st}}), nil, true, time.Now())
	require.Len(t, got.Cards, 1)
	assert.Equal(t, fetch.OverMTLS, got.Cards[0].FetchedOver)
	assert.Equal(t, agentID, got.Cards[0].PeerSpiffeID)
	assert.Equal(t, "https://127.0.0.1:"+strconv.Itoa(int(sc.Port))+fetch.PathAgentCard, got.Cards[0].URL)
}
