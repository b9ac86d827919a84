package inbound

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/authz"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// ErrAccessDenied is the error code of a request the authorization policy denies.
const ErrAccessDenied = "access_denied"

// authorization is what inbound.authorization makes of the proxy.
type authorization struct {
	authorizer authz.Authorizer
	// rpcMethod: a rule reads request.rpcMethod, so the body is read for it.
	rpcMethod bool
	dryRun    bool
}

// newAuthorization compiles the policy. config.yaml was refused if it did not compile
// (authconfig.Resolve compiles it too), so a failure here is a bug; it denies every request
// rather than admit them.
func newAuthorization(a authconfig.Authorization, log *zap.Logger) *authorization {
	p, err := authz.Compile(a.AuthzRules(), authz.Effect(a.Default))
	if err != nil {
		log.Error("authorization policy does not compile: every request is denied", zap.Error(err))
		p, _ = authz.Compile(nil, authz.Deny)
	}
	return &authorization{authorizer: p, rpcMethod: p.UsesRPCMethod(), dryRun: a.DryRun}
}

// authorize decides on a request whose token is valid; it reports whether the request may go
// on, having answered it otherwise.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request, az *authorization, claims *Claims) bool {
	// The validator read the chain (bounded by inbound.authorization.maxChainDepth) with the
	// token, and caches both: a copy carries this request's own facts.
	shared := *claims.Request
	req := &shared
	var err error
	req.Method, req.Path = r.Method, r.URL.Path
	if az.rpcMethod {
		req.RPCMethod, err = readRPCMethod(r)
		if err != nil {
			var be *bodyError
			errors.As(err, &be)
			if !az.dryRun {
				telemetry.Default.Decision("deny", "body", 0)
				p.log.Info("request refused", auditFields(req, "body", "deny", false, be.Reason)...)
				writeError(w, be.Status, ErrInvalidRequest, be.Reason)
				return false
			}
			telemetry.Default.Decision("would_deny", "body", 0)
			p.log.Info("would refuse the request", auditFields(req, "body", "deny", true, be.Reason)...)
		}
	}
	start := time.Now()
	d, err := az.authorizer.Authorize(r.Context(), req)
	took := time.Since(start)
	if err != nil { // no decision (an external authorizer that failed): closed
		d = authz.Decision{Rule: d.Rule, Reason: "no decision: " + err.Error()}
		if d.Rule == "" {
			d.Rule = "error"
		}
	}
	if d.Allowed {
		telemetry.Default.Decision("allow", d.Rule, took)
		p.log.Debug("request allowed", auditFields(req, d.Rule, "allow", az.dryRun, d.Reason)...)
		return true
	}
	if az.dryRun {
		telemetry.Default.Decision("would_deny", d.Rule, took)
		p.log.Info("would deny the request", auditFields(req, d.Rule, "deny", true, d.Reason)...)
		return true
	}
	telemetry.Default.Decision("deny", d.Rule, took)
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
		zap.String("rule", rule),
		zap.String("result", result),
		zap.Bool("dryRun", dryRun),
		zap.String("reason", reason),
	}
}
