package outbound

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing/tracingtest"
)

// traced gives the fixture's proxy and exchanger a tracer exporting to an in-test OTLP/HTTP
// receiver, every span sampled.
func (f *fixture) traced() (*tracing.Tracing, *tracingtest.Receiver) {
	f.t.Helper()
	rcv := tracingtest.NewHTTP(f.t)
	dir := f.t.TempDir()
	for k, v := range map[string]string{tracing.FileEndpoint: rcv.Endpoint, tracing.FileProtocol: tracing.ProtocolHTTP, tracing.FileSampler: "always_on"} {
		require.NoError(f.t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644))
	}
	tr := tracing.New(dir, zap.NewNop())
	tr.Reload()
	require.True(f.t, tr.On())
	f.proxy.Tracing, f.proxy.exchanger.Tracing = tr, tr
	return tr, rcv
}

// traceEcho is a destination that answers with the traceparent it received.
func traceEcho(t *testing.T) netip.AddrPort {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("Traceparent"))
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

const (
	agentTraceID = "0af7651916cd43dd8448eb211c80319c"
	agentSpanID  = "b7ad6b7169203331"
)

// callTraced sends a request of the agent's span through the proxy and returns the status and
// the traceparent the destination received.
func (f *fixture) callTraced(dst netip.AddrPort, host, token string) (int, string) {
	f.t.Helper()
	f.dst.Store(&dst)
	req, err := http.NewRequest(http.MethodGet, "http://"+f.addr+"/v1/items?key=secret", nil)
	require.NoError(f.t, err)
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Traceparent", "00-"+agentTraceID+"-"+agentSpanID+"-01")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestExchangeSpansIssuedCachedFailed: each request the agent sends is a CLIENT span, child of
// the agent's span, and the parent the destination sees; each exchange is a span under it:
// CLIENT when the identity provider was asked (issued, or failed with its OAuth error code and
// status Error), INTERNAL when the cache answered. No token, subject or exchanged, is exported.
func TestExchangeSpansIssuedCachedFailed(t *testing.T) {
	f := newFixture(t, rules)
	tr, rcv := f.traced()
	up := traceEcho(t)

	status, seen := f.callTraced(up, "api.example.com", "user-token-1")
	require.Equal(t, http.StatusOK, status, seen)
	status, _ = f.callTraced(up, "api.example.com", "user-token-1")
	require.Equal(t, http.StatusOK, status)
	f.idp.set(func(te *tokenEndpoint) { te.refuse = "invalid_grant" })
	status, _ = f.callTraced(up, "api.example.com", "user-token-2")
	require.Equal(t, http.StatusForbidden, status)
	require.NoError(t, tr.ForceFlush(context.Background()))
	rcv.Wait(t, 6)

	requests := rcv.Named(tracing.SpanOutbound)
	require.Len(t, requests, 3)
	byID := map[string]tracingtest.Span{}
	for _, s := range requests {
		assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, s.Kind)
		assert.Equal(t, agentTraceID, hex.EncodeToString(s.TraceID))
		assert.Equal(t, agentSpanID, hex.EncodeToString(s.ParentSpanID), "a child of the agent's span")
		assert.Equal(t, "api.example.com", s.Attributes["server.address"])
		assert.Equal(t, "/v1/items", s.Attributes["url.path"])
		byID[hex.EncodeToString(s.SpanID)] = s
	}
	parts := strings.Split(seen, "-")
	require.Len(t, parts, 4, "the destination got a traceparent: %q", seen)
	assert.Equal(t, agentTraceID, parts[1])
	_, isOutbound := byID[parts[2]]
	assert.True(t, isOutbound, "the destination's parent is the outbound proxy's span")

	exchanges := map[string]tracingtest.Span{}
	for _, s := range rcv.Named(tracing.SpanExchange) {
		exchanges[s.Attributes["kagenti.exchange.result"]] = s
		_, under := byID[hex.EncodeToString(s.ParentSpanID)]
		assert.True(t, under, "the exchange is part of the request's span")
		assert.Equal(t, "api", s.Attributes["kagenti.exchange.audience"])
	}
	require.Len(t, exchanges, 3, "issued, cached, failed")
	assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, exchanges["issued"].Kind)
	assert.Equal(t, tracepb.Span_SPAN_KIND_INTERNAL, exchanges["cached"].Kind)
	assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, exchanges["failed"].Kind)
	assert.Equal(t, "invalid_grant", exchanges["failed"].Attributes["kagenti.exchange.error"])
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, exchanges["failed"].StatusCode)
	assert.Equal(t, "403", byID[hex.EncodeToString(exchanges["failed"].ParentSpanID)].Attributes["http.response.status_code"])

	raw := rcv.Raw()
	for _, secret := range []string{"user-token-1", "user-token-2", "exchanged(", "key=secret", "s3cret"} {
		assert.False(t, bytes.Contains(raw, []byte(secret)), "%q is in the exported bytes", secret)
	}
	calls := f.idp.Calls()
	require.NotEmpty(t, calls)
}

// TestEgressDecisionIsASpanEvent: a request the egress policy denies is a span with the
// decision as an event, and status Error.
func TestEgressDecisionIsASpanEvent(t *testing.T) {
	f := newFixture(t, denyAllBut("{host: api.example.com}"))
	tr, rcv := f.traced()
	up := traceEcho(t)
	status, _ := f.callTraced(up, "elsewhere.example.org", "user-token")
	require.Equal(t, http.StatusForbidden, status)
	require.NoError(t, tr.ForceFlush(context.Background()))
	s := rcv.Wait(t, 1)[0]
	assert.Equal(t, tracing.SpanOutbound, s.Name)
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, s.StatusCode)
	require.Len(t, s.Events, 1)
	assert.Equal(t, tracing.EventEgress, s.Events[0].Name)
	assert.Equal(t, "deny", s.Events[0].Attributes["kagenti.egress.result"])
	assert.Equal(t, "default", s.Events[0].Attributes["kagenti.egress.rule"])
}
