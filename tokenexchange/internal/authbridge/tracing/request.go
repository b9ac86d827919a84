package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// StartRequest starts the span name of kind for an HTTP request a proxy forwards: the child of the
// trace context the request carries (traceparent, tracestate) when it carries one, and the parent
// the other side sees, because the request forwarded carries the span's context instead. attrs
// gives the span's attributes, asked for only when the span records. The writer returned
// remembers the answer's status for EndRequest.
func StartRequest(tracer trace.Tracer, w http.ResponseWriter, r *http.Request, name string, kind trace.SpanKind,
	attrs func() []attribute.KeyValue) (http.ResponseWriter, *http.Request, trace.Span) {
	carrier := propagation.HeaderCarrier(r.Header)
	ctx := Propagator.Extract(r.Context(), carrier)
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(kind))
	if span.IsRecording() {
		span.SetAttributes(attrs()...)
	}
	Propagator.Inject(ctx, carrier)
	return &StatusWriter{ResponseWriter: w}, r.WithContext(ctx), span
}

// EndRequest records the answer's status (w from StartRequest) and ends span. A CLIENT span's 4xx
// and 5xx are errors (OpenTelemetry's HTTP conventions); any other span's status is its proxy's to
// set.
func EndRequest(span trace.Span, w http.ResponseWriter, kind trace.SpanKind) {
	if sw, ok := w.(*StatusWriter); ok && span.IsRecording() {
		status := sw.Status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(KeyHTTPStatus.Int(status))
		if kind == trace.SpanKindClient && status >= 400 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
}
