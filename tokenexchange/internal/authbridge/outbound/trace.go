package outbound

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
)

// startSpan starts the span of an HTTP request the agent sends out (tracing.StartRequest): a
// CLIENT span (the outbound proxy is the agent's client side towards the destination, as an Istio
// sidecar's outbound span is), the child of the agent's own span when the request carries a
// traceparent, and the parent the destination sees.
func startSpan(tracer trace.Tracer, w http.ResponseWriter, r *http.Request, dst netip.AddrPort) (http.ResponseWriter, *http.Request, trace.Span) {
	return tracing.StartRequest(tracer, w, r, tracing.SpanOutbound, trace.SpanKindClient, func() []attribute.KeyValue {
		host, port := r.Host, strconv.Itoa(int(dst.Port()))
		if h, p, err := net.SplitHostPort(r.Host); err == nil {
			host, port = h, p
		}
		if host == "" {
			host = dst.Addr().Unmap().String()
		}
		return []attribute.KeyValue{tracing.KeyHTTPMethod.String(tracing.Method(r.Method)), tracing.KeyServerAddr.String(host),
			tracing.KeyServerPort.String(port), tracing.KeyURLPath.String(r.URL.Path)}
	})
}

// spanEgress records an egress decision as an event of the request's span.
func spanEgress(r *http.Request, pol *egressPolicy, d egressDecision, protocol string) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	result := "allow"
	switch {
	case d.allowed:
	case pol.dryRun:
		result = "would_deny"
	default:
		result = "deny"
	}
	span.AddEvent(tracing.EventEgress, trace.WithAttributes(tracing.KeyEgressResult.String(result),
		tracing.KeyEgressRule.String(d.rule), tracing.KeyEgressProtocol.String(protocol)))
}
