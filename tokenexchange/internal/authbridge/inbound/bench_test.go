package inbound

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
)

func measure(b *testing.B, url, token string) { measureBody(b, url, token, nil) }

// measureBody is measure with a POST of body when body is not nil.
func measureBody(b *testing.B, url, token string, body []byte) {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if body != nil {
			req, _ = http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		}
		req.Header.Set("Authorization", "Bearer "+token)
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

// BenchmarkAgentDirect is the baseline: the agent without the proxy.
func BenchmarkAgentDirect(b *testing.B) {
	port := agent(b)
	measure(b, "http://127.0.0.1:"+strconv.Itoa(int(port))+"/tasks", "x")
}

// BenchmarkThroughInbound validates an RS256 token on every request: the proxy's overhead is this
// minus BenchmarkAgentDirect.
func BenchmarkThroughInbound(b *testing.B) {
	f := newFixture(b)
	measure(b, f.url+"/tasks", f.token(f.valid(nil)))
}

// tenRulePolicy is a policy of ten rules that a request through middle evaluates in full (five
// deny rules, then five allow rules, the last of which allows); none reads the body.
const tenRulePolicy = `inbound:
  authorization:
    rules:
    - {name: no-banned-subject, effect: Deny, when: 'subject in ["mallory", "eve"]'}
    - {name: no-deep-chain, effect: Deny, when: 'chain.size() > 4'}
    - {name: no-foreign-caller, effect: Deny, when: '!caller.startsWith("spiffe://cluster.local/")'}
    - {name: no-admin-path, effect: Deny, when: 'request.path.startsWith("/admin")'}
    - {name: no-guests, effect: Deny, when: '"/guests" in groups'}
    - {name: partner-0, effect: Allow, when: 'caller == "spiffe://cluster.local/ns/partner-0/sa/agent"'}
    - {name: partner-1, effect: Allow, when: 'caller == "spiffe://cluster.local/ns/partner-1/sa/agent"'}
    - {name: partner-2, effect: Allow, when: 'caller == "spiffe://cluster.local/ns/partner-2/sa/agent"'}
    - {name: partner-3, effect: Allow, when: 'caller == "spiffe://cluster.local/ns/partner-3/sa/agent"'}
    - {name: through-middle, effect: Allow, when: 'chain.size() >= 1 && chain[0] == "spiffe://cluster.local/ns/agents/sa/middle" && "agent:invoke" in scopes'}
`

// BenchmarkThroughInboundWithPolicy is BenchmarkThroughInbound with the ten-rule policy and a
// token with a delegation chain: the policy's cost is the difference between the two.
func BenchmarkThroughInboundWithPolicy(b *testing.B) {
	f := newFixture(b)
	f.withPolicy(tenRulePolicy)
	measure(b, f.url+"/tasks", f.viaMiddle())
}

// BenchmarkThroughInboundWithRPCPolicy is an A2A JSON-RPC POST (a 1 KiB message/send) through
// a policy that decides on request.rpcMethod, so the body is read, parsed and put back; the
// baseline is the same POST without a policy.
func BenchmarkThroughInboundWithRPCPolicy(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"` +
		strings.Repeat("x", 900) + `"}]}}}`)
	for _, policy := range []string{"inbound: {}\n", "inbound: {authorization: {rules: [{name: a2a, effect: Allow, when: 'request.rpcMethod in [\"message/send\", \"tasks/get\"]'}]}}\n"} {
		name := "none"
		if strings.Contains(policy, "rules") {
			name = "rpcMethod"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b)
			f.withPolicy(policy)
			measureBody(b, f.url+"/", f.viaMiddle(), body)
		})
	}
}

// BenchmarkValidate is the validation alone, per signature algorithm.
func BenchmarkValidate(b *testing.B) {
	for _, key := range []idptest.Key{idptest.NewRSAKey(b, "rsa"), idptest.NewECKey(b, "ec")} {
		b.Run(string(key.Alg), func(b *testing.B) {
			jwks := idptest.NewJWKSServer(b, key)
			v := &Validator{Keys: NewKeySet(jwks.URL(), http.DefaultClient), Policy: Policy{Issuer: issuer, Audience: audience, RequiredScopes: []string{"agent:invoke"}}}
			tok := key.Sign(b, idptest.Claims(issuer, audience, time.Hour, map[string]any{"scope": "agent:invoke"}))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Validate(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCanonicalPath is the per-request cost of the path check and of the removal of forged
// proxy headers, for a plain path and for one that needs normalising.
func BenchmarkCanonicalPath(b *testing.B) {
	h := http.Header{"Accept": {"*/*"}, "Authorization": {"Bearer x"}, "Content-Type": {"application/json"}, "User-Agent": {"a2a"}}
	for _, p := range []string{"/tasks/123", "//tasks/./a/../123"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := canonicalPath(p); err != nil {
					b.Fatal(err)
				}
				removeSpellings(h, proxySetHeaders)
			}
		})
	}
}

// BenchmarkThroughInboundTraced is BenchmarkThroughInboundWithPolicy with tracing on: every span
// sampled (always_on) and exported in batches over OTLP/HTTP to a receiver that discards them.
// The cost of tracing is the difference between the two.
func BenchmarkThroughInboundTraced(b *testing.B) {
	f := newFixture(b)
	f.withPolicy(tenRulePolicy)
	discard := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(discard.Close)
	dir := b.TempDir()
	for k, v := range map[string]string{tracing.FileEndpoint: discard.URL, tracing.FileProtocol: tracing.ProtocolHTTP, tracing.FileSampler: "always_on"} {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	tr := tracing.New(dir, zap.NewNop())
	tr.Reload()
	if !tr.On() {
		b.Fatal("tracing is off")
	}
	f.proxy.Tracing = tr
	measure(b, f.url+"/tasks", f.viaMiddle())
	_ = tr.ForceFlush(context.Background())
}
