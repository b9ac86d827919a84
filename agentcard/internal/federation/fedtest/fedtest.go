// Package fedtest builds what the federation tests need: a CA per trust domain with real X.509
// SVIDs, signed cards, a hub on a loopback TLS listener and member agents dialling it.
package fedtest

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
	"github.com/kagenti/platform/agentcard/internal/federation/member"
	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// Domain is a SPIFFE trust domain with its CA.
type Domain struct {
	TD        spiffeid.TrustDomain
	CA        *devca.CA
	BundlePEM []byte
}

// NewDomain creates a trust domain and its CA.
func NewDomain(t testing.TB, td string) *Domain {
	t.Helper()
	ca, err := devca.NewCA(td, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &Domain{TD: spiffeid.RequireTrustDomainFromString(td), CA: ca, BundlePEM: devca.CertPEM(ca.Cert)}
}

// SVID issues an X.509-SVID for path in d, valid until notAfter (an hour when zero).
func (d *Domain) SVID(t testing.TB, path string, notAfter time.Time) *x509svid.SVID {
	t.Helper()
	id := spiffeid.RequireFromPath(d.TD, path)
	s, err := d.CA.NewSVID(id.String(), devca.SVIDOptions{NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	return &x509svid.SVID{ID: id, Certificates: s.Chain, PrivateKey: s.Key}
}

// Bundle is d's trust bundle as the verifier reads it.
func (d *Domain) Bundle(t testing.TB) *signature.Bundle {
	t.Helper()
	b, err := signature.ParseBundle(d.TD, d.BundlePEM)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SignedCard returns a card named agent signed by spiffe://<d>/ns/<ns>/sa/<sa>, and that identity.
func (d *Domain) SignedCard(t testing.TB, ns, sa, agent, version string) ([]byte, string) {
	t.Helper()
	id := spiffeid.RequireFromPath(d.TD, "/ns/"+ns+"/sa/"+sa)
	s, err := d.CA.NewSVID(id.String(), devca.SVIDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := signature.Sign(testcards.Named(agent, version), signature.SignOptions{Key: s.Key, Chain: s.Chain})
	if err != nil {
		t.Fatal(err)
	}
	return signed, id.String()
}

// Registration is a FederatedCluster for member d named name.
func Registration(name string, d *Domain, ttl, grace time.Duration) v1alpha1.FederatedCluster {
	return v1alpha1.FederatedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.FederatedClusterSpec{TrustDomain: d.TD.Name(), TrustBundle: string(d.BundlePEM),
			TTL: &metav1.Duration{Duration: ttl}, GracePeriod: &metav1.Duration{Duration: grace}},
	}
}

// AgentPath is the member agent's default identity path.
const AgentPath = hub.DefaultAgentPath

// Hub is a hub on a loopback listener.
type Hub struct {
	*hub.Hub
	Domain  *Domain
	SVID    *tlsid.Static
	Address string
	stop    func()
}

// StartHub serves h over mutual TLS with an SVID of hubDomain until the test ends (or Stop).
func StartHub(t testing.TB, hubDomain *Domain, h *hub.Hub) *Hub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := tlsid.NewStatic(hubDomain.SVID(t, "/ns/kagenti-system/sa/kagenti-agentcard-hub", time.Time{}))
	srv := h.NewGRPCServer(tlsid.ServerConfig(src, h.Registry, h.RejectedCertificate))
	go func() { _ = srv.Serve(ln) }()
	out := &Hub{Hub: h, Domain: hubDomain, SVID: src, Address: ln.Addr().String(), stop: srv.Stop}
	t.Cleanup(srv.Stop)
	return out
}

// Stop stops the hub's server (its streams end).
func (h *Hub) Stop() { h.stop() }

// NewHub returns a hub with registrations regs and clock c.
func NewHub(c clock.PassiveClock, regs ...v1alpha1.FederatedCluster) *hub.Hub {
	g := hub.NewRegistry()
	g.Replace(regs)
	return &hub.Hub{Registry: g, Store: hub.NewStore(c), Log: logr.Discard()}
}

// Member is a member agent with a counted connection.
type Member struct {
	*member.Agent
	SVID *tlsid.Static
	// Written counts the bytes the member wrote to the hub (TLS records included).
	Written atomic.Int64
}

// NewMember returns a member agent of cluster name in d, dialling hubAddr and trusting hubDomain.
func NewMember(t testing.TB, name string, d *Domain, hubDomain *Domain, hubAddr string) *Member {
	t.Helper()
	m := &Member{SVID: tlsid.NewStatic(d.SVID(t, AgentPath, time.Time{}))}
	hubBundle := hubDomain.Bundle(t)
	hubID := spiffeid.RequireFromPath(hubDomain.TD, "/ns/kagenti-system/sa/kagenti-agentcard-hub")
	m.Agent = &member.Agent{
		Cluster: name, HubAddress: hubAddr, Log: member.NewLog(), Logger: logr.Discard(),
		TLS:        tlsid.ClientConfig(m.SVID, hubBundle.X509, hubID),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Dialer: func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, n: &m.Written}, nil
		},
	}
	return m
}

// Run starts the member agent until the returned stop is called (or the test ends).
func (m *Member) Run(t testing.TB) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Start(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// Eventually polls cond every 10 ms until it holds or 20 s pass.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, 20*time.Second, what, cond)
}

// EventuallyWithin polls cond every 10 ms until it holds or limit passes.
func EventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LeafOf is an SVID's leaf certificate.
func LeafOf(s *x509svid.SVID) *x509.Certificate { return s.Certificates[0] }

// Key names a card.
func Key(ns, name string) string { return fmt.Sprintf("%s/%s", ns, name) }
