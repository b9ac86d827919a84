package outbound

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"testing"
	"time"
)

// latencies runs b.N GETs with client and reports p50 and p99 in microseconds.
func latencies(b *testing.B, client *http.Client, url, host, token func(i int) string) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req, _ := http.NewRequest(http.MethodGet, url(i), nil)
		req.Host = host(i)
		req.Header.Set("Authorization", "Bearer "+token(i))
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func keepAlive() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

// BenchmarkDirect is the baseline: the client calls the destination itself.
func BenchmarkDirect(b *testing.B) {
	up := callee(b)
	latencies(b, keepAlive(), func(int) string { return "http://" + up.String() + "/" },
		func(int) string { return "api.example.com" }, func(int) string { return "user-token" })
}

// BenchmarkReverseProxyBaseline is the floor of any Go HTTP proxy hop: a plain
// httputil.ReverseProxy to the destination, no detection, no exchange, no header rules. The
// outbound proxy's own cost is BenchmarkProxyCachedToken minus this.
func BenchmarkReverseProxyBaseline(b *testing.B) {
	up := callee(b)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: up.String()})
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	srv := httptest.NewServer(rp)
	b.Cleanup(srv.Close)
	latencies(b, keepAlive(), func(int) string { return srv.URL + "/" },
		func(int) string { return "api.example.com" }, func(int) string { return "user-token" })
}

// BenchmarkProxyCachedToken goes through the outbound proxy with a token exchanged once: the
// added latency is this minus BenchmarkDirect.
func BenchmarkProxyCachedToken(b *testing.B) {
	f, up := benchFixture(b)
	latencies(b, keepAlive(), func(int) string { return "http://" + f.addr + "/" },
		func(int) string { return "api.example.com" }, func(int) string { return "user-token" })
	_ = up
	if s := f.proxy.exchanger.Stats(); s.Misses != 1 {
		b.Fatalf("want one exchange, got %+v", s)
	}
}

// BenchmarkProxyPassThrough goes through the proxy on a pass-through route (no exchange).
func BenchmarkProxyPassThrough(b *testing.B) {
	f, _ := benchFixture(b)
	latencies(b, keepAlive(), func(int) string { return "http://" + f.addr + "/" },
		func(int) string { return "storage.googleapis.com" }, func(int) string { return "user-token" })
}

// BenchmarkProxyExchangeMiss exchanges every request (a new subject token each time) at a token
// endpoint on loopback that answers at once: the proxy's own cost of a cache miss.
func BenchmarkProxyExchangeMiss(b *testing.B) {
	f, _ := benchFixture(b)
	latencies(b, keepAlive(), func(int) string { return "http://" + f.addr + "/" },
		func(int) string { return "api.example.com" }, func(i int) string { return fmt.Sprintf("user-token-%d", i) })
}

func benchFixture(b *testing.B) (*fixture, netip.AddrPort) {
	f := newFixture(b, rules)
	up := callee(b)
	f.dst.Store(&up)
	return f, up
}

// BenchmarkDecide is the per-request cost of choosing a request's route: the Host name checked
// against the destination (answered from the cache) and the rules applied.
func BenchmarkDecide(b *testing.B) {
	p := decideProxy(newFakeDNS(decideDNS))
	for _, tc := range []struct{ name, host, dst string }{
		{"name", "api.example.com", "10.0.0.1:443"},
		{"address", "10.0.0.9", "10.0.0.9:80"},
		{"forged", "storage.googleapis.com", "10.0.0.66:80"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dst := netip.MustParseAddrPort(tc.dst)
			p.decide(decideConfig, tc.host, dst)
			b.ReportAllocs()
			for b.Loop() {
				p.decide(decideConfig, tc.host, dst)
			}
		})
	}
}

// BenchmarkProxyExplicitCachedToken is BenchmarkProxyCachedToken in the injector's proxy mode: the
// client names the proxy as its HTTP proxy (absolute-form requests, the destination resolved per
// request from the name cache) instead of being redirected. The difference between the two is
// proxy mode's own cost per request (the transparent benchmark's Destination is a test double:
// the real getsockopt(SO_ORIGINAL_DST) runs once per connection, not per request).
func BenchmarkProxyExplicitCachedToken(b *testing.B) {
	f := newFixture(b, rules)
	up := callee(b)
	proxy, _ := url.Parse("http://" + f.addr)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, Proxy: http.ProxyURL(proxy)}}
	target := fmt.Sprintf("http://api.example.com:%d/", up.Port())
	latencies(b, client, func(int) string { return target },
		func(int) string { return "" }, func(int) string { return "user-token" })
	if s := f.proxy.exchanger.Stats(); s.Misses != 1 {
		b.Fatalf("want one exchange, got %+v", s)
	}
}
