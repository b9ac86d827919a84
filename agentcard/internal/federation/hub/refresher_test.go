package hub_test

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
)

// withEndpoint is fedtest.Registration with an https_spiffe bundle endpoint at url.
func withEndpoint(name string, d *fedtest.Domain, url string) v1alpha1.FederatedCluster {
	fc := fedtest.Registration(name, d, time.Minute, time.Hour)
	fc.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: url, Profile: v1alpha1.BundleProfileSPIFFE,
		SPIFFEID: "spiffe://" + d.TD.Name() + "/spire/server", RefreshInterval: &metav1.Duration{Duration: 5 * time.Minute}}
	return fc
}

func newRefresher(t *testing.T, g *hub.Registry, c *clocktesting.FakeClock) *hub.BundleRefresher {
	return &hub.BundleRefresher{Registry: g, Clock: c, Tick: time.Second, Timeout: 2 * time.Second, Log: testr.New(t)}
}

func refreshNow(r *hub.BundleRefresher) {
	r.RefreshDue(context.Background())
	r.Wait()
}

func trustBundleCondition(g *hub.Registry, name string) *metav1.Condition {
	reg, _ := g.Get(name)
	st := hub.RenderStatus(reg, hub.MemberStatus{})
	return st.Condition(v1alpha1.ConditionTrustBundleCurrent)
}

// The leader's refresher keeps a member's bundle current from its endpoint: the member's SPIRE
// rotates from CA1 to CA2 without anyone editing the FederatedCluster. Each refresh is fetched
// when due (the interval, not every tick), and the fetched bundle is in the status the hub
// writes, from which a restarted hub (or a new leader) trusts it before fetching again, until
// spec.trustBundle is edited.
func TestBundleRefresherFollowsTheMembersCARotation(t *testing.T) {
	ca1 := fedtest.NewDomain(t, "member.example")
	ca2 := fedtest.NewDomain(t, "member.example")
	served := spiffebundle.FromX509Authorities(ca1.TD, []*x509.Certificate{ca1.CA.Cert, ca2.CA.Cert})
	served.SetRefreshHint(time.Hour) // longer than the interval: the interval wins
	var fetches atomic.Int32
	url := bundleServer(t, ca1, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		handler(t, ca1.TD, served).ServeHTTP(w, r)
	}))
	fc := withEndpoint("member", ca1, url)
	g := hub.NewRegistry()
	g.Replace([]v1alpha1.FederatedCluster{fc})
	accepted := func(g *hub.Registry, d *fedtest.Domain) error {
		_, _, err := x509svid.Verify(d.SVID(t, "/ns/kagenti-system/sa/kagenti-agentcard", time.Time{}).Certificates, g)
		return err
	}
	if c := trustBundleCondition(g, "member"); c == nil || c.Reason != v1alpha1.ReasonBundlePending {
		t.Fatalf("TrustBundleCurrent before a fetch: %+v, want False Pending", c)
	}

	clock := clocktesting.NewFakeClock(time.Now())
	r := newRefresher(t, g, clock)
	refreshNow(r)
	if err := accepted(g, ca2); err != nil {
		t.Fatalf("an SVID of CA2 after the refresh: %v", err)
	}
	reg, _ := g.Get("member")
	st := hub.RenderStatus(reg, hub.MemberStatus{})
	c := st.Condition(v1alpha1.ConditionTrustBundleCurrent)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonBundleRefreshed || st.TrustBundle == nil || st.TrustBundle.Authorities != 2 {
		t.Fatalf("status after the refresh: %+v, trustBundle %+v", c, st.TrustBundle)
	}
	if !strings.Contains(c.Message, "2 X.509 authorities") {
		t.Errorf("message %q", c.Message)
	}

	refreshNow(r)
	clock.Step(4 * time.Minute)
	refreshNow(r)
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches within the refresh interval, want 1", n)
	}
	served.RemoveX509Authority(ca1.CA.Cert) // the rotation completes
	clock.Step(2 * time.Minute)
	refreshNow(r)
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after the interval, want 2", n)
	}
	if accepted(g, ca1) == nil {
		t.Fatal("an SVID of CA1 was accepted after the endpoint dropped CA1")
	}

	// A restart: the status the hub wrote is all a new registry has.
	reg, _ = g.Get("member")
	fc.Status = hub.RenderStatus(reg, hub.MemberStatus{})
	restarted := hub.NewRegistry()
	restarted.Replace([]v1alpha1.FederatedCluster{fc})
	if err := accepted(restarted, ca2); err != nil {
		t.Fatalf("after a restart, an SVID of CA2 (the persisted bundle): %v", err)
	}
	if accepted(restarted, ca1) == nil {
		t.Fatal("after a restart, CA1 of the outdated spec.trustBundle was trusted again")
	}

	// An admin's edit of spec.trustBundle: the spec again, the persisted bundle ignored.
	fc.Spec.TrustBundle += "\n"
	restarted.Replace([]v1alpha1.FederatedCluster{fc})
	if err := accepted(restarted, ca1); err != nil {
		t.Fatalf("CA1 after spec.trustBundle was edited: %v", err)
	}
	if accepted(restarted, ca2) == nil {
		t.Fatal("the fetched bundle outlived an edit of spec.trustBundle")
	}
}

// Every way an endpoint can fail leaves the member on the bundle in effect, says why in
// TrustBundleCurrent, and does not hold back another member's refresh.
func TestBundleRefresherReportsBadEndpoints(t *testing.T) {
	good := fedtest.NewDomain(t, "good.example")
	goodURL := bundleServer(t, good, handler(t, good.TD, spiffebundle.FromX509Authorities(good.TD, []*x509.Certificate{good.CA.Cert})))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "https://" + closed.Addr().String()
	_ = closed.Close()

	cases := map[string]struct {
		url    func(d *fedtest.Domain) string
		reason string
		says   string
	}{
		"another SPIFFE ID": {func(d *fedtest.Domain) string {
			return bundleServerAs(t, d, "/not/spire", handler(t, d.TD, spiffebundle.FromX509Authorities(d.TD, []*x509.Certificate{d.CA.Cert})))
		}, v1alpha1.ReasonEndpointNotAuthenticated, "unexpected ID"},
		"another trust domain's bundle": {func(d *fedtest.Domain) string {
			other := fedtest.NewDomain(t, "other.example")
			return bundleServer(t, d, handler(t, other.TD, spiffebundle.FromX509Authorities(other.TD, []*x509.Certificate{other.CA.Cert})))
		}, v1alpha1.ReasonBundleRejected, `authority of trust domain "other.example"`},
		"garbage": {func(d *fedtest.Domain) string {
			return bundleServer(t, d, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }))
		}, v1alpha1.ReasonBundleRejected, ""},
		"10 MiB": {func(d *fedtest.Domain) string {
			return bundleServer(t, d, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(strings.Repeat(" ", 10<<20)))
			}))
		}, v1alpha1.ReasonBundleRejected, "larger than"},
		"unreachable": {func(*fedtest.Domain) string { return closedURL }, v1alpha1.ReasonEndpointUnreachable, ""},
		"slow": {func(d *fedtest.Domain) string {
			release := make(chan struct{})
			url := bundleServer(t, d, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
			t.Cleanup(func() { close(release) }) // before the server closes: Cleanup runs last in, first out
			return url
		}, v1alpha1.ReasonEndpointUnreachable, "Timeout"},
	}
	regs := []v1alpha1.FederatedCluster{withEndpoint("good", good, goodURL)}
	domains := map[string]*fedtest.Domain{}
	i := 0
	for name, tc := range cases {
		i++
		d := fedtest.NewDomain(t, "m"+string(rune('a'+i))+".example")
		domains[name] = d
		regs = append(regs, withEndpoint(strings.ReplaceAll(name, " ", "-"), d, tc.url(d)))
	}
	g := hub.NewRegistry()
	g.Replace(regs)
	refreshNow(newRefresher(t, g, clocktesting.NewFakeClock(time.Now())))

	if c := trustBundleCondition(g, "good"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("the good member: %+v", c)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := trustBundleCondition(g, strings.ReplaceAll(name, " ", "-"))
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.says) ||
				!strings.Contains(c.Message, "spec.trustBundle is in effect") {
				t.Fatalf("TrustBundleCurrent %+v, want False %s naming %q and the bundle in effect", c, tc.reason, tc.says)
			}
			d := domains[name]
			if _, _, err := x509svid.Verify(d.SVID(t, "/x", time.Time{}).Certificates, g); err != nil {
				t.Fatalf("the member's own CA is no longer trusted: %v", err)
			}
		})
	}
}

// https_web: the endpoint is authenticated by Web PKI for its host name.
func TestBundleRefresherWebProfile(t *testing.T) {
	d := fedtest.NewDomain(t, "web.example")
	srv := httptest.NewTLSServer(handler(t, d.TD, spiffebundle.FromX509Authorities(d.TD, []*x509.Certificate{d.CA.Cert})))
	t.Cleanup(srv.Close)
	fc := fedtest.Registration("web", d, time.Minute, time.Hour)
	fc.Spec.BundleEndpoint = &v1alpha1.BundleEndpoint{URL: srv.URL, Profile: v1alpha1.BundleProfileWeb}

	untrusted := hub.NewRegistry()
	untrusted.Replace([]v1alpha1.FederatedCluster{fc})
	refreshNow(newRefresher(t, untrusted, clocktesting.NewFakeClock(time.Now())))
	if c := trustBundleCondition(untrusted, "web"); c == nil || c.Reason != v1alpha1.ReasonEndpointNotAuthenticated {
		t.Fatalf("a certificate outside the Web PKI roots: %+v, want EndpointNotAuthenticated", c)
	}

	g := hub.NewRegistry()
	g.Replace([]v1alpha1.FederatedCluster{fc})
	r := newRefresher(t, g, clocktesting.NewFakeClock(time.Now()))
	r.WebRoots = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	refreshNow(r)
	if c := trustBundleCondition(g, "web"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("https_web endpoint with its root: %+v", c)
	}
}
