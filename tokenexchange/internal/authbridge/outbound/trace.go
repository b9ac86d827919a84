package outbound

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
)

// startSpan starts the span of an HTTP request the agent sends out: a CLIENT span (the outbound
// proxy is the agent's client side towards the destination, as an Istio sidecar's outbound span
// is), the child of the agent's own span when the request carries a traceparent, and the parent
// the destination sees: the request forwarded carries its context instead of the agent's.
func startSpan(tracer trace.Tracer, w http.ResponseWriter, r *http.Request, dst netip.AddrPort) (http.ResponseWriter, *http.Request, trace.Span) {
	carrier := propagation.HeaderCarrier(r.Header)
	ctx := tracing.Propagator.Extract(r.Context(), carrier)
	ctx, span := tracer.Start(ctx, tracing.SpanOutbound, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		host, port := r.Host, strconv.Itoa(int(dst.Port()))
		if h, p, err := net.SplitHostPort(r.Host); err == nil {
			host, port = h, p
		}
		if host == "" {
			host = dst.Addr().Unmap().String()
		}
		span.SetAttributes(tracing.KeyHTTPMethod.String(tracing.Method(r.Method)), tracing.KeyServerAddr.String(host),
			tracing.KeyServerPort.String(port), tracing.KeyURLPath.String(r.URL.Path))
	}
	tracing.Propagator.Inject(ctx, carrier)
	return &tracing.StatusWriter{ResponseWriter: w}, r.WithContext(ctx), span
}

// endSpan records the answer's status (4xx and 5xx are errors of a CLIENT span) and ends span.
func endSpan(span trace.Span, w http.ResponseWriter) {
	if sw, ok := w.(*tracing.StatusWriter); ok && span.IsRecording() {
		status := sw.Status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(tracing.KeyHTTPStatus.Int(status))
		if status >= 400 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
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
