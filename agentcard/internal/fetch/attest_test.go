package fetch_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/fetch/sidecartest"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

const (
	agentID      = "spiffe://cluster.local/ns/agents/sa/weather"
	controllerID = "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-agentcard"
)

type domain struct {
	ca     *devca.CA
	bundle *x509bundle.Bundle
}

func newDomain(t *testing.T, td string) domain {
	ca, err := devca.NewCA(td, time.Hour)
	require.NoError(t, err)
	return domain{ca: ca, bundle: x509bundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(td), []*x509.Certificate{ca.Cert})}
}

func (d domain) svid(t *testing.T, id string) *x509svid.SVID {
	s, err := d.ca.NewSVID(id, devca.SVIDOptions{})
	require.NoError(t, err)
	return &x509svid.SVID{ID: spiffeid.RequireFromString(id), Certificates: s.Chain, PrivateKey: s.Key}
}

// servePod serves a card over mutual TLS on 127.0.0.1 with svid, trusting bundle for clients, and
// reports the SPIFFE ID of each client that fetched it.
func servePod(t *testing.T, svid *x509svid.SVID, bundle *x509bundle.Bundle) (port int32, clients chan string) {
	clients = make(chan string, 8)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// Not httptest's StartTLS: it would add its own certificate, which the handshake prefers.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := x509svid.IDFromCert(r.TLS.PeerCertificates[0])
		if err == nil {
			clients <- id.String()
		}
		_, _ = w.Write([]byte(`{"name":"weather"}`))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		_ = srv.Serve(tls.NewListener(ln, tlsconfig.MTLSServerConfig(tlsid.NewStatic(svid), bundle, tlsconfig.AuthorizeAny())))
	}()
	t.Cleanup(func() { _ = srv.Close() })
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n), clients
}

func attesting(d domain, svid *x509svid.SVID) *fetch.Fetcher {
	return fetch.New(4, 2*time.Second).WithAttestation(&fetch.Attestation{SVID: tlsid.NewStatic(svid), Bundles: d.bundle})
}

// TestAttestedFetch: with its own SVID, the controller fetches an https card over mutual TLS and
// accepts it only from a pod that proves the identity the card is bound to; how the card was
// fetched is in the response (and so in the AgentCard's status).
func TestAttestedFetch(t *testing.T) {
	td := newDomain(t, "cluster.local")
	f := attesting(td, td.svid(t, controllerID))
	req := func(port int32, peer string) fetch.Request {
		return fetch.Request{Scheme: "https", PodIP: "127.0.0.1", Port: port, Paths: []string{fetch.PathAgentCard}, PeerID: peer}
	}

	port, clients := servePod(t, td.svid(t, agentID), td.bundle)
	resp, err := f.Fetch(context.Background(), req(port, agentID))
	require.NoError(t, err)
	assert.Equal(t, fetch.OverMTLS, resp.Over)
	assert.Equal(t, agentID, resp.PeerID)
	assert.Equal(t, `{"name":"weather"}`, string(resp.Body))
	assert.Equal(t, controllerID, <-clients, "the pod saw the controller's SVID")

	t.Run("a pod proving another identity is refused", func(t *testing.T) {
		_, err := f.Fetch(context.Background(), req(port, "spiffe://cluster.local/ns/agents/sa/other"))
		require.Error(t, err)
		assert.Equal(t, "PeerNotAttested", fetch.KindOf(err))
		assert.Contains(t, err.Error(), "the pod did not prove it is spiffe://cluster.local/ns/agents/sa/other over mutual TLS")
	})

	t.Run("a pod with an SVID from a CA outside the trust bundle is refused", func(t *testing.T) {
		other := newDomain(t, "cluster.local")
		port, _ := servePod(t, other.svid(t, agentID), td.bundle)
		_, err := f.Fetch(context.Background(), req(port, agentID))
		require.Error(t, err)
		assert.Equal(t, "PeerNotAttested", fetch.KindOf(err), "%v", err)
	})

	t.Run("an expired SVID is refused", func(t *testing.T) {
		s, err := td.ca.NewSVID(agentID, devca.SVIDOptions{NotAfter: time.Now().Add(-time.Minute)})
		require.NoError(t, err)
		port, _ := servePod(t, &x509svid.SVID{ID: spiffeid.RequireFromString(agentID), Certificates: s.Chain, PrivateKey: s.Key}, td.bundle)
		_, err = f.Fetch(context.Background(), req(port, agentID))
		require.Error(t, err)
		assert.Equal(t, "PeerNotAttested", fetch.KindOf(err), "%v", err)
	})

	t.Run("without an identity of its own the controller fetches https unauthenticated, and says so", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
		t.Cleanup(srv.Close)
		_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
		n, _ := strconv.Atoi(p)
		resp, err := fetch.New(1, time.Second).Fetch(context.Background(), req(int32(n), agentID))
		require.NoError(t, err)
		assert.Equal(t, fetch.OverHTTPS, resp.Over)
		assert.Empty(t, resp.PeerID)
	})
}

// agentServing is an agent behind its sidecar, serving its card on the A2A well-known path.
var agentServing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != fetch.PathAgentCard {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(`{"name":"weather"}`))
})

// TestAttestedFetchThroughAnMTLSSidecar: a pod whose kagenti-authbridge inbound terminates mutual
// TLS (mtls.mode strict or permissive; sidecartest stands in for it) gives its card to the
// attested fetch, whether its AgentCard says https or http (the default, and what an auto-created
// AgentCard says): a strict sidecar's 426 to a plaintext fetch is followed by the fetch over
// mutual TLS, which still requires the bound identity.
func TestAttestedFetchThroughAnMTLSSidecar(t *testing.T) {
	td := newDomain(t, "cluster.local")
	f := attesting(td, td.svid(t, controllerID))
	req := func(scheme string, port int32) fetch.Request {
		return fetch.Request{Scheme: scheme, PodIP: "127.0.0.1", Port: port, Paths: []string{fetch.PathAgentCard, fetch.PathLegacy}, PeerID: agentID}
	}

	t.Run("https: mutual TLS with ALPN kagenti-mtls/1", func(t *testing.T) {
		sc := sidecartest.Serve(t, true, td.svid(t, agentID), td.bundle, agentServing)
		resp, err := f.Fetch(context.Background(), req("https", sc.Port))
		require.NoError(t, err)
		assert.Equal(t, fetch.OverMTLS, resp.Over)
		assert.Equal(t, agentID, resp.PeerID)
		assert.Equal(t, `{"name":"weather"}`, string(resp.Body))
		assert.Equal(t, []string{contract.MTLSALPN}, sc.ALPN(), "the fetch declares the sidecar protocol")
		assert.Equal(t, []string{controllerID}, sc.Peers(), "the sidecar saw the controller's SVID")
	})

	t.Run("http to a strict sidecar: asked again over mutual TLS", func(t *testing.T) {
		sc := sidecartest.Serve(t, true, td.svid(t, agentID), td.bundle, agentServing)
		resp, err := f.Fetch(context.Background(), req("http", sc.Port))
		require.NoError(t, err)
		assert.Equal(t, fetch.OverMTLS, resp.Over)
		assert.Equal(t, agentID, resp.PeerID)
		assert.Equal(t, "https://127.0.0.1:"+strconv.Itoa(int(sc.Port))+fetch.PathAgentCard, resp.URL)
		assert.Equal(t, `{"name":"weather"}`, string(resp.Body))
		assert.Equal(t, 1, sc.Plaintext(), "one plaintext request, refused")
		assert.Equal(t, []string{contract.MTLSALPN}, sc.ALPN())
	})

	t.Run("the upgrade still requires the identity the card is bound to", func(t *testing.T) {
		sc := sidecartest.Serve(t, true, td.svid(t, "spiffe://cluster.local/ns/agents/sa/impostor"), td.bundle, agentServing)
		_, err := f.Fetch(context.Background(), req("http", sc.Port))
		require.Error(t, err)
		assert.Equal(t, "PeerNotAttested", fetch.KindOf(err), "%v", err)
		assert.Contains(t, err.Error(), "the pod did not prove it is "+agentID)
	})

	t.Run("http to a permissive sidecar stays plain", func(t *testing.T) {
		sc := sidecartest.Serve(t, false, td.svid(t, agentID), td.bundle, agentServing)
		resp, err := f.Fetch(context.Background(), req("http", sc.Port))
		require.NoError(t, err)
		assert.Equal(t, fetch.OverHTTP, resp.Over)
		assert.Empty(t, sc.ALPN(), "no handshake")
	})

	t.Run("without an identity of its own the controller says what the pod requires", func(t *testing.T) {
		sc := sidecartest.Serve(t, true, td.svid(t, agentID), td.bundle, agentServing)
		_, err := fetch.New(1, 2*time.Second).Fetch(context.Background(), req("http", sc.Port))
		require.Error(t, err)
		assert.Equal(t, fetch.KindMTLSRequired, fetch.KindOf(err))
		assert.Contains(t, err.Error(), "HTTP 426 Upgrade Required: the pod accepts only mutual TLS")
		assert.Empty(t, sc.ALPN())
	})

	t.Run("a 426 that does not ask for TLS is an answer like any other", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Upgrade", "websocket")
			w.WriteHeader(http.StatusUpgradeRequired)
		}))
		t.Cleanup(srv.Close)
		_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
		n, _ := strconv.Atoi(p)
		_, err := f.Fetch(context.Background(), req("http", int32(n)))
		require.Error(t, err)
		assert.Equal(t, "HTTPError", fetch.KindOf(err), "%v", err)
	})
}
