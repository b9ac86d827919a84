package inbound

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/authz/extauthz"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// ErrAccessDenied is the error code of a request the authorization policy denies.
const ErrAccessDenied = "access_denied"

// authorization is what inbound.authorization makes of the proxy.
type authorization struct {
	authorizer authz.Authorizer
	// external is the external authorizer (inbound.authorization.external), asked when the
	// rules allow; nil when there is none. Its connection lives as long as this configuration.
	external *extauthz.Client
	// externalName names it in the audit record ("external authorizer <address>").
	externalName string
	// rpcMethod: a rule reads request.rpcMethod, or the external authorizer is sent it, so the
	// body is read for it.
	rpcMethod bool
	dryRun    bool

	// mu is held (read) by every request using this authorization, and (write) by release, so
	// that the external authorizer's connection is closed once no request uses it any more.
	mu       sync.RWMutex
	released bool
}

// EngineRules names the embedded rules' decisions in a span's events (ExternalRule the external
// authorizer's).
const EngineRules = "rules"

// ExternalRule is the rule a decision of the external authorizer reports (403 body, audit
// record, metrics).
const ExternalRule = "external"

// newAuthorization compiles the policy and, when inbound.authorization.external is set, opens
// the external authorizer's connection. config.yaml was refused if either could not be built
// (authconfig.Resolve checks both), so a failure here is a bug; it denies every request rather
// than admit them.
func newAuthorization(a authconfig.Authorization, log *zap.Logger) *authorization {
	p, err := authz.Compile(a.AuthzRules(), authz.Effect(a.Default))
	if err != nil {
		log.Error("authorization policy does not compile: every request is denied", zap.Error(err))
		p, _ = authz.Compile(nil, authz.Deny)
	}
	az := &authorization{authorizer: p, rpcMethod: p.UsesRPCMethod(), dryRun: a.DryRun}
	if e := a.External; e != nil {
		cfg := extauthz.Config{Address: e.Address, Timeout: e.Timeout, FailOpen: e.FailOpen}
		if e.TLS != nil {
			pool, err := e.TLS.CertPool()
			if err != nil {
				log.Error("external authorizer's CA bundle holds no certificate: every request is denied", zap.Error(err))
				deny, _ := authz.Compile(nil, authz.Deny)
				return &authorization{authorizer: deny, dryRun: a.DryRun}
			}
			cfg.TLS = &tls.Config{RootCAs: pool, ServerName: e.TLS.ServerName, MinVersion: tls.VersionTLS12}
		}
		c, err := extauthz.New(cfg)
		if err != nil {
			log.Error("external authorizer cannot be used: every request is denied", zap.Error(err))
			deny, _ := authz.Compile(nil, authz.Deny)
			return &authorization{authorizer: deny, dryRun: a.DryRun}
		}
		az.external, az.externalName, az.rpcMethod = c, "external authorizer "+e.Address, true
	}
	return az
}

// acquire holds az for one request; false when az was released (a new configuration took over
// between loading the state and this call).
func (az *authorization) acquire() bool {
	az.mu.RLock()
	if az.released {
		az.mu.RUnlock()
		return false
	}
	return true
}

func (az *authorization) done() { az.mu.RUnlock() }

// release closes the external authorizer's connection once the requests holding az are done.
// It does not wait for them.
func (az *authorization) release(log *zap.Logger) {
	if az == nil || az.external == nil {
		return
	}
	go func() {
		az.mu.Lock()
		defer az.mu.Unlock()
		az.released = true
		if err := az.external.Close(); err != nil {
			log.Debug("closing the previous external authorizer's connection", zap.Error(err))
		}
	}()
}

// authorize decides on a request whose token is valid; it reports whether the request may go
// on, having answered it otherwise. The rules decide first, and a denial of theirs is final; when
// they allow and an external authorizer is configured, it must allow too. In a dry run what
// either would deny is logged and the request goes on.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request, az *authorization, claims *Claims) bool {
	// The validator read the chain (bounded by inbound.authorization.maxChainDepth) with the
	// token, and caches both: a copy carries this request's own facts.
	shared := *claims.Request
	req := &shared
	var err error
	req.Method, req.Path, req.Peer = r.Method, r.URL.Path, PeerID(r)
	span := trace.SpanFromContext(r.Context())
	if az.rpcMethod {
		req.RPCMethod, err = readRPCMethod(r)
		if err != nil {
			var be *bodyError
			errors.As(err, &be)
			if !az.dryRun {
				telemetry.Default.Decision("deny", "body", 0)
				spanDecision(span, req, EngineRules, "body", "deny", false)
				p.log.Info("request refused", auditFields(req, "body", "deny", false, be.Reason)...)
				writeError(w, be.Status, ErrInvalidRequest, be.Reason)
				return false
			}
			telemetry.Default.Decision("would_deny", "body", 0)
			spanDecision(span, req, EngineRules, "body", "would_deny", true)
			p.log.Info("would refuse the request", auditFields(req, "body", "deny", true, be.Reason)...)
		}
	}
	start := time.Now()
	d, err := az.authorizer.Authorize(r.Context(), req)
	took := time.Since(start)
	if err != nil { // no decision: closed
		d = authz.Decision{Rule: d.Rule, Reason: "no decision: " + err.Error()}
		if d.Rule == "" {
			d.Rule = "error"
		}
	}
	if !p.decided(w, span, EngineRules, req, az, d, took, false) {
		return false
	}
	if az.external == nil {
		return true
	}
	start = time.Now()
	d, err = az.external.Authorize(r.Context(), req)
	took = time.Since(start)
	d.Rule = ExternalRule
	return p.decided(w, span, ExternalRule, req, az, d, took, err != nil)
}

// decided applies one authorizer's decision: it logs the audit record, counts it, and answers
// 403 to a denial outside a dry run. It reports whether the request may go on. noDecision: the
// external authorizer gave none, and d is its fail-closed denial or fail-open allow.
func (p *Proxy) decided(w http.ResponseWriter, span trace.Span, engine string, req *authz.Request, az *authorization, d authz.Decision, took time.Duration, noDecision bool) bool {
	if d.Allowed {
		if noDecision { // failed open: always in the audit log
			telemetry.Default.Decision("fail_open", d.Rule, took)
			spanDecision(span, req, engine, d.Rule, "fail_open", az.dryRun)
			p.log.Warn("request allowed: the external authorizer failed open", auditFields(req, d.Rule, "fail_open", az.dryRun, d.Reason)...)
			return true
		}
		telemetry.Default.Decision("allow", d.Rule, took)
		spanDecision(span, req, engine, d.Rule, "allow", az.dryRun)
		p.log.Debug("request allowed", auditFields(req, d.Rule, "allow", az.dryRun, d.Reason)...)
		return true
	}
	if az.dryRun {
		telemetry.Default.Decision("would_deny", d.Rule, took)
		spanDecision(span, req, engine, d.Rule, "would_deny", true)
		p.log.Info("would deny the request", auditFields(req, d.Rule, "deny", true, d.Reason)...)
		return true
	}
	telemetry.Default.Decision("deny", d.Rule, took)
	spanDecision(span, req, engine, d.Rule, "deny", false)
	p.log.Info("request denied", auditFields(req, d.Rule, "deny", false, d.Reason)...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": ErrAccessDenied, "rule": d.Rule, "reason": d.Reason})
	return false
}

// auditFields are the audit record of a decision: the verified facts it was made on, never a
// token.
func auditFields(r *authz.Request, rule, result string, dryRun bool, reason string) []zap.Field {
	return []zap.Field{
		zap.String("subject", r.Subject),
		zap.String("caller", r.Caller),
		zap.Strings("chain", r.Chain),
		zap.Strings("audience", r.Audience),
		zap.String("method", r.Method),
		zap.String("path", r.Path),
		zap.String("rpcMethod", r.RPCMethod),
		zap.String("peer", r.Peer),
		zap.String("rule", rule),
		zap.String("result", result),
		zap.Bool("dryRun", dryRun),
		zap.String("reason", reason),
	}
}
