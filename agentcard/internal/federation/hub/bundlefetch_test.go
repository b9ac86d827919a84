package hub_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
)

// bundleServer serves h over TLS with an SVID of member (path /spire/server, as SPIRE's
// bundle endpoint presents).
func bundleServer(t *testing.T, member *fedtest.Domain, h http.Handler) string {
	t.Helper()
	return bundleServerAs(t, member, "/spire/server", h)
}

// bundleServerAs is bundleServer presenting an SVID of member with path.
func bundleServerAs(t *testing.T, member *fedtest.Domain, path string, h http.Handler) string {
	t.Helper()
	svid := member.SVID(t, path, time.Time{})
	// Not httptest's StartTLS: it adds its own certificate, which wins over GetCertificate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(tls.NewListener(ln, tlsconfig.TLSServerConfig(svid))) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}

func handler(t *testing.T, td spiffeid.TrustDomain, b *spiffebundle.Bundle) http.Handler {
	t.Helper()
	h, err := federation.NewHandler(td, b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func endpoint(t *testing.T, member *fedtest.Domain, url string) hub.BundleEndpoint {
	t.Helper()
	return hub.BundleEndpoint{
		URL:   url,
		ID:    spiffeid.RequireFromPath(member.TD, "/spire/server"),
		Trust: x509bundle.FromX509Authorities(member.TD, []*x509.Certificate{member.CA.Cert}),
	}
}

func TestFetchBundleReturnsTheEndpointsAuthorities(t *testing.T) {
	member := fedtest.NewDomain(t, "member.example")
	next := fedtest.NewDomain(t, "member.example") // the CA the member rotates to
	served := spiffebundle.FromX509Authorities(member.TD, []*x509.Certificate{member.CA.Cert, next.CA.Cert})
	url := bundleServer(t, member, handler(t, member.TD, served))

	b, err := hub.FetchBundle(context.Background(), member.TD, endpoint(t, member, url), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !b.HasX509Authority(next.CA.Cert) || !b.HasX509Authority(member.CA.Cert) || len(b.X509Authorities()) != 2 {
		t.Fatalf("fetched authorities = %d, want CA1 and CA2", len(b.X509Authorities()))
	}
}

func TestFetchBundleRefusesBadEndpoints(t *testing.T) {
	member := fedtest.NewDomain(t, "member.example")
	good := spiffebundle.FromX509Authorities(member.TD, []*x509.Certificate{member.CA.Cert})
	goodURL := bundleServer(t, member, handler(t, member.TD, good))
	body := func(b []byte) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(b) })
	}
	// A bundle with a JWT authority only: valid SPIFFE JSON, nothing to verify an X.509-SVID with.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwtOnly := spiffebundle.New(member.TD)
	if err := jwtOnly.AddJWTAuthority("k1", key.Public()); err != nil {
		t.Fatal(err)
	}
	empty, err := jwtOnly.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "https://" + closed.Addr().String()
	_ = closed.Close()
	other := fedtest.NewDomain(t, "other.example")

	cases := []struct {
		name    string
		ep      hub.BundleEndpoint
		reason  string
		message string
	}{
		{"another SPIFFE ID", func() hub.BundleEndpoint {
			ep := endpoint(t, member, goodURL)
			ep.ID = spiffeid.RequireFromPath(member.TD, "/ns/default/sa/web")
			return ep
		}(), hub.ReasonEndpointNotAuthenticated, "unexpected ID"},
		{"SVID of another CA", endpoint(t, member, bundleServer(t, other, handler(t, member.TD, good))), hub.ReasonEndpointNotAuthenticated, "x509svid"},
		{"garbage", endpoint(t, member, bundleServer(t, member, body([]byte("<html>not a bundle</html>")))), hub.ReasonBundleRejected, "bundle from"},
		{"no X.509 authorities", endpoint(t, member, bundleServer(t, member, body(empty))), hub.ReasonBundleRejected, "no X.509 authorities"},
		{"10 MiB body", endpoint(t, member, bundleServer(t, member, body([]byte(strings.Repeat(" ", 10<<20))))), hub.ReasonBundleRejected, "larger than"},
		{"unreachable", endpoint(t, member, closedURL), hub.ReasonEndpointUnreachable, "connect"},
		{"slow", endpoint(t, member, bundleServer(t, member, slow)), hub.ReasonEndpointUnreachable, "Timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := hub.FetchBundle(context.Background(), member.TD, tc.ep, 300*time.Millisecond)
			var fe *hub.FetchError
			if !errors.As(err, &fe) {
				t.Fatalf("FetchBundle = %v, %v; want a FetchError", b, err)
			}
			if fe.Reason != tc.reason || !strings.Contains(fe.Error(), tc.message) {
				t.Fatalf("FetchBundle error = %q (reason %s), want reason %s mentioning %q", fe, fe.Reason, tc.reason, tc.message)
			}
		})
	}
}

// A member's SPIRE rotates its CA: once the endpoint's bundle is fetched, SVIDs of the new CA are
// accepted; once the endpoint drops the old CA, its SVIDs are refused; the fetched bundle survives
// the status writer's rebuilds and yields to an edited spec.trustBundle.
func TestFetchedBundleFollowsTheMembersCARotation(t *testing.T) {
	ca1 := fedtest.NewDomain(t, "member.example")
	ca2 := fedtest.NewDomain(t, "member.example")
	other := fedtest.NewDomain(t, "other.example")
	regs := []v1alpha1.FederatedCluster{
		fedtest.Registration("member", ca1, time.Minute, time.Hour),
		fedtest.Registration("other", other, time.Minute, time.Hour),
	}
	g := hub.NewRegistry()
	g.Replace(regs)
	accepted := func(d *fedtest.Domain) error {
		_, _, err := x509svid.Verify(d.SVID(t, "/ns/a/sa/b", time.Time{}).Certificates, g)
		return err
	}
	if accepted(ca2) == nil {
		t.Fatal("an SVID of CA2 was accepted before the bundle was fetched")
	}

	served := spiffebundle.FromX509Authorities(ca1.TD, []*x509.Certificate{ca1.CA.Cert, ca2.CA.Cert})
	url := bundleServer(t, ca1, handler(t, ca1.TD, served))
	regs[0].Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: url, Profile: v1alpha1.BundleProfileSPIFFE, SPIFFEID: "spiffe://member.example/spire/server"}
	g.Replace(regs)
	b, err := hub.FetchBundle(context.Background(), ca1.TD, endpoint(t, ca1, url), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetFetchedBundle("member", b, time.Now()); err != nil {
		t.Fatal(err)
	}
	g.Replace(regs) // the status writer's rebuild
	if err := accepted(ca2); err != nil {
		t.Fatalf("SVID of CA2 after the refresh: %v", err)
	}
	if err := accepted(ca1); err != nil {
		t.Fatalf("SVID of CA1 while the endpoint still serves it: %v", err)
	}
	if err := accepted(other); err != nil {
		t.Fatalf("another member: %v", err)
	}

	served.RemoveX509Authority(ca1.CA.Cert)
	if b, err = hub.FetchBundle(context.Background(), ca1.TD, hub.BundleEndpoint{
		URL: url, ID: spiffeid.RequireFromPath(ca1.TD, "/spire/server"), Trust: g,
	}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.SetFetchedBundle("member", b, time.Now()); err != nil {
		t.Fatal(err)
	}
	if accepted(ca1) == nil {
		t.Fatal("an SVID of CA1 was accepted after the endpoint dropped CA1")
	}
	if err := accepted(ca2); err != nil {
		t.Fatalf("SVID of CA2: %v", err)
	}
	if err := g.SetFetchedBundle("other", b, time.Now()); err == nil {
		t.Fatal("member.example's bundle was installed for other.example")
	}

	// The admin edits spec.trustBundle: the spec applies again.
	edited := *regs[0].DeepCopy()
	edited.Spec.TrustBundle += "\n"
	g.Replace([]v1alpha1.FederatedCluster{edited, regs[1]})
	if err := accepted(ca1); err != nil {
		t.Fatalf("SVID of CA1 after spec.trustBundle was edited: %v", err)
	}
	if accepted(ca2) == nil {
		t.Fatal("the fetched bundle outlived an edit of spec.trustBundle")
	}
}
