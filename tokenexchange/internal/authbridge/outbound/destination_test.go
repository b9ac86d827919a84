package outbound

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// fakeDNS answers from a table and counts its lookups; a lookup of a name it does not know fails.
type fakeDNS struct {
	mu      sync.Mutex
	records map[string][]netip.Addr
	lookups atomic.Int32
	gate    chan struct{} // when set, every lookup waits for it to close
}

func newFakeDNS(records map[string]string) *fakeDNS {
	d := &fakeDNS{records: map[string][]netip.Addr{}}
	for name, addrs := range records {
		d.set(name, addrs)
	}
	return d
}

func (d *fakeDNS) set(name, addrs string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var list []netip.Addr
	for a := range strings.SplitSeq(addrs, ",") {
		list = append(list, netip.MustParseAddr(a))
	}
	d.records[name] = list
}

func (d *fakeDNS) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	d.lookups.Add(1)
	if d.gate != nil {
		select {
		case <-d.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.records[host]; ok {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, errors.New("no such host")
}

// decideConfig has an IdP known by name and by address, a pass-through and routes by name and by
// address.
var decideConfig = authconfig.Config{
	IdP: authconfig.IdP{Provider: authconfig.ProviderOIDC, Issuer: "http://keycloak.kagenti-system.svc:8080/realms/default",
		JWKSURL: "http://10.96.0.11:8080/certs"},
	Outbound: authconfig.Outbound{Enabled: true, TokenExchange: authconfig.TokenExchange{
		Enabled: true, TokenURL: "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/token",
		DefaultTarget: authconfig.Target{Audience: "fallback"},
		Routes: []authconfig.Route{
			{Host: "api.example.com", Target: authconfig.Target{Audience: "api"}},
			{Host: "svc.example.com:9443", Target: authconfig.Target{Audience: "svc-9443"}},
			{Host: "10.0.0.9", Target: authconfig.Target{Audience: "by-address"}},
			{Host: "*.googleapis.com", Passthrough: true},
		},
	}},
}

var decideDNS = map[string]string{
	"keycloak.kagenti-system.svc": "10.96.0.10",
	"api.example.com":             "10.0.0.1,fd00::1",
	"svc.example.com":             "10.0.0.2",
	"storage.googleapis.com":      "10.0.0.3",
	"callee.team.svc":             "10.96.5.5",
	"headless.team.svc":           "10.244.0.7,10.244.1.8",
}

func decideProxy(dns Resolver) *Proxy { return &Proxy{Resolver: dns, names: newNameCache()} }

func (p *Proxy) decide(c authconfig.Config, host string, dst netip.AddrPort) Decision {
	return Decide(c, p.routeName(host, dst), strconv.Itoa(int(dst.Port())))
}

var (
	exchangedFor = func(aud, rule string) Decision {
		return Decision{Exchange: true, Target: authconfig.Target{Audience: aud}, Rule: rule}
	}
	fallback = Decision{Exchange: true, Target: authconfig.Target{Audience: "fallback"}}
)

// decideCases are TestRouteFollowsTheRealDestination's table and FuzzDecide's seeds.
var decideCases = []struct {
	host, dst string
	want      Decision
}{
	// A Host that resolves to the destination chooses the route.
	{"keycloak.kagenti-system.svc", "10.96.0.10:8080", Decision{IdP: true}},
	{"KEYCLOAK.kagenti-system.svc.:8080", "10.96.0.10:8080", Decision{IdP: true}},
	{"10.96.0.11:8080", "10.96.0.11:8080", Decision{IdP: true}},
	{"", "10.96.0.11:8080", Decision{IdP: true}},
	{"api.example.com", "10.0.0.1:443", exchangedFor("api", "api.example.com")},
	{"api.example.com", "[fd00::1]:443", exchangedFor("api", "api.example.com")},
	{"api.example.com", "[::ffff:10.0.0.1]:443", exchangedFor("api", "api.example.com")},
	{"svc.example.com", "10.0.0.2:9443", exchangedFor("svc-9443", "svc.example.com:9443")},
	{"storage.googleapis.com", "10.0.0.3:80", Decision{Rule: "*.googleapis.com"}},
	{"callee.team.svc:8080", "10.96.5.5:8080", fallback},
	{"headless.team.svc:8080", "10.244.1.8:8080", fallback},
	// The Host's port never counts: the destination's is the real one.
	{"keycloak.kagenti-system.svc:8080", "10.96.0.10:9090", fallback},
	{"svc.example.com:9443", "10.0.0.2:80", fallback},
	{"10.96.0.11:8080", "10.96.0.11:8081", fallback},
	// A Host that is not the destination decides nothing: the destination address does.
	{"keycloak.kagenti-system.svc:8080", "10.0.0.66:8080", fallback},
	{"10.96.0.11:8080", "10.0.0.66:8080", fallback},
	{"storage.googleapis.com", "10.0.0.66:80", fallback},
	{"evil.googleapis.com", "10.0.0.66:80", fallback}, // does not resolve
	{"api.example.com", "10.0.0.9:443", exchangedFor("by-address", "10.0.0.9")},
	{"keycloak.kagenti-system.svc", "10.0.0.9:8080", exchangedFor("by-address", "10.0.0.9")},
	{"[fd00::1]", "10.0.0.1:443", fallback},
	{"10.0.0.9", "10.0.0.9:80", exchangedFor("by-address", "10.0.0.9")},
	{"", "10.0.0.9:80", exchangedFor("by-address", "10.0.0.9")},
}

// TestRouteFollowsTheRealDestination: the route (exchange target, pass-through, identity provider)
// is chosen by the Host header only when its name resolves to the connection's original destination
// address, on that destination's port; any other request is decided by its destination address and
// never reaches the identity provider's pass-through on the strength of its Host header.
func TestRouteFollowsTheRealDestination(t *testing.T) {
	p := decideProxy(newFakeDNS(decideDNS))
	for _, tc := range decideCases {
		assert.Equal(t, tc.want, p.decide(decideConfig, tc.host, netip.MustParseAddrPort(tc.dst)), "Host %q to %s", tc.host, tc.dst)
	}
}

// TestNameLookupsAreCachedAndShared: a name is looked up once for concurrent requests and then
// answered from the cache for nameTTL; a destination the answer does not list is looked up again
// once the answer is nameRetry old (a headless service's new pod), and no sooner.
func TestNameLookupsAreCachedAndShared(t *testing.T) {
	dns := newFakeDNS(decideDNS)
	dns.gate = make(chan struct{})
	p := decideProxy(dns)
	now := time.Unix(1_000_000, 0)
	var clock sync.Mutex
	p.names.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	dst := netip.MustParseAddrPort("10.244.0.7:8080")
	pod := netip.MustParseAddrPort("10.244.2.9:8080")

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { assert.Equal(t, "headless.team.svc", p.routeName("headless.team.svc", dst)) })
	}
	for dns.lookups.Load() == 0 {
		time.Sleep(time.Millisecond) // until the first lookup is under way
	}
	close(dns.gate)
	wg.Wait()
	first := dns.lookups.Load()
	require.Equal(t, int32(1), first, "one lookup for 20 requests")
	assert.Equal(t, "headless.team.svc", p.routeName("headless.team.svc", dst))
	assert.Equal(t, first, dns.lookups.Load(), "answered from the cache")

	dns.set("headless.team.svc", "10.244.0.7,10.244.2.9") // a new pod
	assert.Equal(t, "10.244.2.9", p.routeName("headless.team.svc", pod), "the cached answer does not list it")
	assert.Equal(t, first, dns.lookups.Load(), "no new lookup before nameRetry")
	advance(nameRetry)
	assert.Equal(t, "headless.team.svc", p.routeName("headless.team.svc", pod), "looked up again")
	assert.Equal(t, first+1, dns.lookups.Load())
	for range 10 {
		p.routeName("headless.team.svc", netip.MustParseAddrPort("10.6.6.6:80"))
	}
	assert.Equal(t, first+1, dns.lookups.Load(), "a forged Host costs at most one lookup per nameRetry")

	dns.set("headless.team.svc", "10.244.2.9") // the first pod is gone
	advance(nameTTL - time.Nanosecond)         // since the last lookup
	assert.Equal(t, "headless.team.svc", p.routeName("headless.team.svc", dst), "trusted until nameTTL")
	advance(time.Nanosecond)
	assert.Equal(t, "10.244.0.7", p.routeName("headless.team.svc", dst), "expired: looked up again")
	assert.Equal(t, first+2, dns.lookups.Load())
}

// TestConcurrentLookupsOfOneNameAreOne: concurrent requests for one uncached name share one query.
func TestConcurrentLookupsOfOneNameAreOne(t *testing.T) {
	dns := newFakeDNS(decideDNS)
	dns.gate = make(chan struct{})
	p := decideProxy(dns)
	dst := netip.MustParseAddrPort("10.96.5.5:8080")
	var started sync.WaitGroup
	var wg sync.WaitGroup
	for range 8 {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			assert.Equal(t, "callee.team.svc", p.routeName("callee.team.svc", dst))
		})
	}
	started.Wait()
	for dns.lookups.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the other goroutines join the lookup under way
	close(dns.gate)
	wg.Wait()
	assert.Equal(t, int32(1), dns.lookups.Load())
}

func TestNameCacheIsBounded(t *testing.T) {
	p := decideProxy(newFakeDNS(decideDNS))
	dst := netip.MustParseAddrPort("10.0.0.66:80")
	for i := range maxNames + 10 {
		p.routeName("n"+strconv.Itoa(i)+".example", dst)
	}
	assert.LessOrEqual(t, len(p.names.names), maxNames)
}

// FuzzDecide: whatever the Host header and the destination, the identity provider's pass-through
// is chosen only for a destination that is the provider's (resolved) address and port; a decision
// that differs from the destination address's own comes from a Host name that resolves to the
// destination; and a port in the Host header never changes the decision.
//
//	go test ./internal/authbridge/outbound -run '^$' -fuzz FuzzDecide -fuzztime 60s
func FuzzDecide(f *testing.F) {
	for _, tc := range decideCases {
		f.Add(tc.host, tc.dst)
	}
	for _, s := range []string{"[::1]:80", "idp.example.com:443", "10.96.0.10", "api.example.com:8443:1", ":80", "[", "%"} {
		f.Add(s, "10.96.0.10:8080")
	}
	dns := newFakeDNS(decideDNS)
	p := decideProxy(dns)
	idp := map[netip.AddrPort]bool{
		netip.MustParseAddrPort("10.96.0.10:8080"): true, // keycloak.kagenti-system.svc:8080
		netip.MustParseAddrPort("10.96.0.11:8080"): true, // the JWKS URL's address
	}
	f.Fuzz(func(t *testing.T, host, dstText string) {
		dst, err := netip.ParseAddrPort(dstText)
		if err != nil || dst.Addr().Zone() != "" {
			return
		}
		d := p.decide(decideConfig, host, dst)
		real := netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
		if d.IdP && !idp[real] {
			t.Fatalf("Host %q to %s: identity provider pass-through for a destination that is not the provider", host, dst)
		}
		byAddr := Decide(decideConfig, dst.Addr().Unmap().String(), strconv.Itoa(int(dst.Port())))
		if !reflect.DeepEqual(d, byAddr) {
			name := hostName(host)
			addrs, err := dns.LookupNetIP(context.Background(), "ip", name)
			ok := err == nil && func() bool {
				for _, a := range addrs {
					if a.Unmap() == real.Addr() {
						return true
					}
				}
				return false
			}()
			if !ok {
				t.Fatalf("Host %q to %s: decided %+v, not as the destination (%+v), though %q does not resolve to it", host, dst, d, byAddr, name)
			}
		}
		if !strings.ContainsAny(host, ":[]") {
			for _, port := range []string{"1", "8080", "65535"} {
				if withPort := p.decide(decideConfig, host+":"+port, dst); !reflect.DeepEqual(withPort, d) {
					t.Fatalf("Host %q to %s: port %s in the Host changed %+v to %+v", host, dst, port, d, withPort)
				}
			}
		}
	})
}
