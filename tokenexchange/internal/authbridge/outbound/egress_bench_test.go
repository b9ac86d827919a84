package outbound

import (
	"net/netip"
	"testing"
)

// tenEgressRules is a 10-rule default-deny policy whose last rule allows the benchmarks' host: every
// request checks all ten (cidr, agent and host rules, some with ports).
const tenEgressRules = `{cidr: 10.0.0.0/8}, {cidr: "2001:db8::/32", ports: [443]}, {agent: {name: weather}},
  {agent: {name: search, namespace: tools}, ports: [8080]}, {host: "*.openai.com", ports: [443]}, {host: api.anthropic.com},
  {host: "*.googleapis.com:443"}, {cidr: 192.168.0.0/16}, {host: "mcp-*.tools.svc.cluster.local"}, {host: api.example.com}`

// BenchmarkProxyEgress is BenchmarkProxyCachedToken without an egress policy and with a 10-rule
// one, in the same run: the difference is the policy's cost per request.
func BenchmarkProxyEgress(b *testing.B) {
	for _, tc := range []struct{ name, config string }{
		{"none", rules},
		{"10-rules", denyAllBut(tenEgressRules)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b, tc.config)
			up := callee(b)
			f.dst.Store(&up)
			b.ReportAllocs()
			latencies(b, keepAlive(), func(int) string { return "http://" + f.addr + "/" },
				func(int) string { return "api.example.com" }, func(int) string { return "user-token" })
		})
	}
}

// BenchmarkEgressDecide is the policy's own cost: the 10 rules applied to a verified name (the
// last rule matches) and to a bare address (no rule does).
func BenchmarkEgressDecide(b *testing.B) {
	pol := compileEgress(newFixture(b, denyAllBut(tenEgressRules)).cfg.Current().Config, nil)
	dst := netip.MustParseAddrPort("127.0.0.1:8080")
	for _, tc := range []struct{ name, host string }{{"name", "api.example.com"}, {"address", ""}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pol.decide(tc.host, dst)
			}
		})
	}
}
