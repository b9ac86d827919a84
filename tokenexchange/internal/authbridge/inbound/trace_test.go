package inbound

import (
	"bytes"
	"context"
	"encoding/hex"
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

// traced gives the fixture's proxy a tracer exporting to an in-test OTLP/HTTP receiver, every
// span sampled, as the trace files of an AgentTrace would.
func (f *fixture) traced() (*tracing.Tracing, *tracingtest.Receiver) {
	f.t.Helper()
	rcv := tracingtest.NewHTTP(f.t)
	dir := f.t.TempDir()
	for k, v := range map[string]string{tracing.FileEndpoint: rcv.Endpoint, tracing.FileProtocol: tracing.ProtocolHTTP,
		tracing.FileSampler: "always_on", tracing.FileServiceName: "weather"} {
		require.NoError(f.t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644))
	}
	tr := tracing.New(dir, zap.NewNop())
	tr.Reload()
	require.True(f.t, tr.On())
	f.proxy.Tracing = tr
	return tr, rcv
}

// The client's trace: trace ID and span ID of a traceparent it sends.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// TestInboundSpanHasTheVerifiedFactsAndNoToken: a request with a token is one SERVER span in the
// client's trace, with the verified facts (subject, caller, chain, audience), the request (method,
// path without its query) and the decision (rule, result); the exported bytes hold no part of
// the token. The agent's request carries the inbound span as its parent.
func TestInboundSpanHasTheVerifiedFactsAndNoToken(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(onlyThroughMiddle)
	tr, rcv := f.traced()
	token := f.viaMiddle()

	a := f.get("/tasks?secret=q", token, map[string]string{"traceparent": clientParent, "tracestate": "vendor=1"})
	require.Equal(t, 200, a.status, a.text)
	require.NoError(t, tr.ForceFlush(context.Background()))
	spans := rcv.Wait(t, 1)
	require.Len(t, spans, 1)
	s := spans[0]
	assert.Equal(t, tracing.SpanInbound, s.Name)
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.Kind)
	assert.Equal(t, clientTraceID, hex.EncodeToString(s.TraceID), "the client's trace goes on")
	assert.Equal(t, clientSpanID, hex.EncodeToString(s.ParentSpanID), "the client's span is the parent")
	assert.Equal(t, map[string]string{
		"http.request.method":       "GET",
		"url.path":                  "/tasks",
		"http.response.status_code": "200",
		"kagenti.subject":           "user-1",
		"kagenti.caller":            middle,
		"kagenti.chain":             middle + "," + caller,
		"kagenti.audience":          audience,
		"kagenti.authz.rule":        "only-through-middle",
		"kagenti.authz.result":      "allow",
		"kagenti.authz.dry_run":     "false",
		"kagenti.result":            "allowed",
	}, s.Attributes)
	require.Len(t, s.Events, 1)
	assert.Equal(t, tracing.EventDecision, s.Events[0].Name)
	assert.Equal(t, "weather", s.Resource["service.name"])
	assert.Equal(t, tracing.Component, s.Resource[tracing.ComponentAttribute])
	assert.NotEqual(t, tracepb.Status_STATUS_CODE_ERROR, s.StatusCode)

	seen := strings.Split(a.header.Get("X-Seen-Traceparent"), "-")
	require.Len(t, seen, 4, "the agent got a traceparent: %q", a.header.Get("X-Seen-Traceparent"))
	assert.Equal(t, clientTraceID, seen[1], "the agent's spans are in the client's trace")
	assert.Equal(t, hex.EncodeToString(s.SpanID), seen[2], "and children of the inbound span")

	raw := rcv.Raw()
	parts := strings.Split(token, ".")
	for i, part := range append(parts, token) {
		assert.False(t, bytes.Contains(raw, []byte(part)), "part %d of the token is in the exported bytes", i)
	}
	assert.False(t, bytes.Contains(raw, []byte("secret=q")), "no query string")
}

// TestDeniedRequestSpanNamesTheRuleWithErrorStatus: a denial is a span with the rule that
// decided, result deny, and status Error; so is a request without a token.
func TestDeniedRequestSpanNamesTheRuleWithErrorStatus(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(onlyThroughMiddle)
	tr, rcv := f.traced()
	require.Equal(t, 403, f.get("/tasks", f.direct(), nil).status)
	require.Equal(t, 401, f.get("/tasks", "", nil).status)
	require.NoError(t, tr.ForceFlush(context.Background()))
	spans := rcv.Wait(t, 2)
	byResult := map[string]tracingtest.Span{}
	for _, s := range spans {
		byResult[s.Attributes["kagenti.result"]] = s
	}
	denied := byResult["denied"]
	assert.Equal(t, "default", denied.Attributes["kagenti.authz.rule"])
	assert.Equal(t, "deny", denied.Attributes["kagenti.authz.result"])
	assert.Equal(t, caller, denied.Attributes["kagenti.caller"])
	assert.Equal(t, "403", denied.Attributes["http.response.status_code"])
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, denied.StatusCode)
	unauthorized := byResult["unauthorized"]
	assert.Equal(t, "401", unauthorized.Attributes["http.response.status_code"])
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, unauthorized.StatusCode)
}

// TestTracingOffLeavesTraceHeadersAlone: without trace files the agent gets the client's
// traceparent as it was sent, and public paths never get a span.
func TestTracingOffLeavesTraceHeadersAlone(t *testing.T) {
	f := newFixture(t)
	a := f.get("/tasks", f.token(f.valid(nil)), map[string]string{"traceparent": clientParent})
	require.Equal(t, 200, a.status)
	assert.Equal(t, clientParent, a.header.Get("X-Seen-Traceparent"))

	tr, rcv := f.traced()
	a = f.get("/.well-known/agent-card.json", "", map[string]string{"traceparent": clientParent})
	require.Equal(t, 200, a.status)
	assert.Equal(t, clientParent, a.header.Get("X-Seen-Traceparent"), "a public path is not traced")
	require.NoError(t, tr.ForceFlush(context.Background()))
	assert.Empty(t, rcv.Spans())
}
