package inbound

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
)

// startSpan starts the span of a request that needs a token (tracing.StartRequest: a SERVER
// span, the child of the client's trace context and the parent of the agent's spans). path is the
// canonical path (pathOK false: the path was refused and is not recorded). Never a header value, a
// query string or a token.
func startSpan(tracer trace.Tracer, w http.ResponseWriter, r *http.Request, path string, pathOK bool) (http.ResponseWriter, *http.Request, trace.Span) {
	return tracing.StartRequest(tracer, w, r, tracing.SpanInbound, trace.SpanKindServer, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{tracing.KeyHTTPMethod.String(tracing.Method(r.Method))}
		if pathOK {
			attrs = append(attrs, tracing.KeyURLPath.String(path))
		}
		return attrs
	})
}

// spanResult records the request's outcome; code is the OAuth error code it was answered with
// ("" when it was let through), which makes the span's status Error.
func spanResult(r *http.Request, result, code string) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyResult.String(result))
	if code != "" {
		span.SetStatus(codes.Error, code)
	}
}

// spanClaims records the verified facts of the token: subject, caller, chain, audience, and the
// mTLS peer.
func spanClaims(r *http.Request, c *Claims) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() || c.Request == nil {
		return
	}
	q := c.Request
	span.SetAttributes(tracing.KeySubject.String(q.Subject), tracing.KeyCaller.String(q.Caller),
		tracing.List(tracing.KeyChain, q.Chain), tracing.List(tracing.KeyAudience, q.Audience))
	if peer := PeerID(r); peer != "" {
		span.SetAttributes(tracing.KeyPeer.String(peer))
	}
}

// spanDecision records one authorizer's decision: an event per decision (the rules, then the
// external authorizer), and the request's deciding rule and result as attributes.
func spanDecision(span trace.Span, req *authz.Request, engine, rule, result string, dryRun bool) {
	if !span.IsRecording() {
		return
	}
	span.AddEvent(tracing.EventDecision, trace.WithAttributes(tracing.KeyDecisionEngine.String(engine),
		tracing.KeyDecisionRule.String(rule), tracing.KeyDecisionResult.String(result)))
	span.SetAttributes(tracing.KeyDecisionRule.String(rule), tracing.KeyDecisionResult.String(result),
		tracing.KeyDecisionDryRun.Bool(dryRun))
	if engine == ExternalRule {
		span.SetAttributes(tracing.KeyDecisionExternal.String(result))
	}
	if req.RPCMethod != "" {
		span.SetAttributes(tracing.KeyRPCMethod.String(req.RPCMethod))
	}
}
