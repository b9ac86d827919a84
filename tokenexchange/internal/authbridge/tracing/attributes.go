package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
)

// Span names.
const (
	// SpanInbound is the inbound proxy's span of a request that needed a token (SERVER).
	SpanInbound = "kagenti.authbridge.inbound"
	// SpanOutbound is the outbound proxy's span of an HTTP request it forwards (CLIENT).
	SpanOutbound = "kagenti.authbridge.outbound"
	// SpanExchange is one token exchange of the outbound proxy: CLIENT when it asked the identity
	// provider, INTERNAL when the cache answered.
	SpanExchange = "kagenti.authbridge.exchange"
)

// Attribute keys. HTTP ones are OpenTelemetry's semantic conventions; the others are ours. None
// holds a token, a header value or a query string.
const (
	KeyHTTPMethod = attribute.Key("http.request.method")
	KeyHTTPStatus = attribute.Key("http.response.status_code")
	KeyURLPath    = attribute.Key("url.path")
	KeyServerAddr = attribute.Key("server.address")
	KeyServerPort = attribute.Key("server.port")

	KeyRPCMethod = attribute.Key("kagenti.rpc_method")
	KeySubject   = attribute.Key("kagenti.subject")
	KeyCaller    = attribute.Key("kagenti.caller")
	KeyChain     = attribute.Key("kagenti.chain")
	KeyAudience  = attribute.Key("kagenti.audience")
	KeyPeer      = attribute.Key("kagenti.peer")
	// KeyResult is the inbound request's outcome (allowed, denied, unauthorized, bad_request).
	KeyResult     = attribute.Key("kagenti.result")
	KeyTokenError = attribute.Key("kagenti.token.error")

	KeyDecisionResult   = attribute.Key("kagenti.authz.result")
	KeyDecisionRule     = attribute.Key("kagenti.authz.rule")
	KeyDecisionDryRun   = attribute.Key("kagenti.authz.dry_run")
	KeyDecisionExternal = attribute.Key("kagenti.authz.external")
	KeyDecisionEngine   = attribute.Key("kagenti.authz.engine")

	KeyExchangeResult   = attribute.Key("kagenti.exchange.result")
	KeyExchangeAudience = attribute.Key("kagenti.exchange.audience")
	KeyExchangeError    = attribute.Key("kagenti.exchange.error")
	KeyExchangeShared   = attribute.Key("kagenti.exchange.shared")

	KeyEgressResult   = attribute.Key("kagenti.egress.result")
	KeyEgressRule     = attribute.Key("kagenti.egress.rule")
	KeyEgressProtocol = attribute.Key("kagenti.egress.protocol")
)

// Event names.
const (
	EventDecision = "kagenti.authz.decision"
	EventEgress   = "kagenti.egress.decision"
)

// MaxListEntries bounds a list attribute (chain, audience); Limits bounds each value's length.
const MaxListEntries = 16

// List is a list attribute of at most MaxListEntries entries.
func List(k attribute.Key, v []string) attribute.KeyValue {
	if len(v) > MaxListEntries {
		v = v[:MaxListEntries]
	}
	return k.StringSlice(v)
}

// Method is an HTTP method as http.request.method records it: a known method, else "_OTHER" (the
// semantic conventions' rule, which keeps a client's invented methods out of the spans).
func Method(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY":
		return m
	}
	return "_OTHER"
}

// StatusWriter remembers the status of the answer, for the span of a request (the inbound's and
// the outbound's). Unwrap lets the reverse proxy flush (streaming) and hijack (upgrades) through
// it (http.ResponseController).
type StatusWriter struct {
	http.ResponseWriter
	// Status is the first final status written (0 until then).
	Status int
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 && code >= 200 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
