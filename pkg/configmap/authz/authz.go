// Package authz is the authorization step of the inbound proxy (and the policy engine agentcard's
// discovery API asks which agents a caller may call): after a token is verified, a
// decision on who may call this agent, on whose behalf, and how. The facts it decides on come
// only from the verified token and the request line, never from headers a caller could set.
package authz

import (
	"context"
	"fmt"
)

// Request is what a decision is made on.
type Request struct {
	// Subject is the token's sub: the end user (or workload) on whose behalf the call is made.
	Subject string
	// Caller is the immediate caller's identity: the current actor (act.sub) when the token has a
	// delegation chain, else the client the token was issued to (client_id, then azp).
	Caller string
	// Chain is the delegation chain of RFC 8693 §4.1, the current actor first: Chain[0] is the
	// immediate caller, Chain[len-1] the first workload that acted for Subject. Empty when the
	// token carries no act claim.
	Chain []string
	// Scopes and Audience are the token's.
	Scopes   []string
	Audience []string
	// Groups is the token's groups claim (a list of strings, as Keycloak's group membership mapper
	// issues it; a single string is one group).
	Groups []string
	// Claims is the whole verified payload, for the claims the fields above do not name.
	Claims map[string]any
	// Method and Path are the HTTP request's (Path canonical, as the agent sees it).
	Method string
	Path   string
	// RPCMethod is the JSON-RPC method of an A2A request (message/send, tasks/get…), empty for a
	// request that is not JSON-RPC.
	RPCMethod string
	// Peer is the SPIFFE ID of the X.509 SVID the peer presented on an mTLS connection (mtls.mode
	// permissive or strict), verified against the trust domain's bundle; empty on plain HTTP.
	Peer string
}

// Decision is an authorizer's answer.
type Decision struct {
	Allowed bool
	// Rule names what decided: a rule's name, "default", or the external authorizer.
	Rule string
	// Reason says why, for the audit record and the 403 body.
	Reason string
}

// Authorizer decides on a verified request. An error means no decision could be made (an
// external authorizer that timed out, say); the caller fails closed unless configured otherwise.
type Authorizer interface {
	Authorize(ctx context.Context, r *Request) (Decision, error)
}

// DefaultMaxChainDepth bounds the nested act claims a token may carry.
const DefaultMaxChainDepth = 8

// ChainError is a token whose delegation chain is malformed or too deep.
type ChainError struct{ Reason string }

func (e *ChainError) Error() string { return "delegation chain: " + e.Reason }

// FromClaims builds the token part of a Request from a verified token's claims (its JSON payload,
// as go-jose decodes it) and its scopes (read from scope or scp). The act claims are nested
// objects inside the signed payload, so every hop in Chain was put there by the issuer. maxDepth
// bounds the chain (DefaultMaxChainDepth when not positive); an act that is not an object with a
// non-empty sub is a *ChainError. A claim past the bounds of a request's facts (MaxFactLength,
// MaxFactEntries) is a *ClaimError naming it.
func FromClaims(raw map[string]any, scopes []string, maxDepth int) (*Request, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxChainDepth
	}
	r := &Request{Scopes: scopes, Claims: raw}
	r.Subject, _ = raw["sub"].(string)
	r.Audience = stringList(raw["aud"])
	r.Groups = stringList(raw["groups"])
	for _, err := range [...]error{checkClaimString("sub", r.Subject), checkClaimList(scopeClaim(raw), r.Scopes),
		checkClaimList("aud", r.Audience), checkClaimList("groups", r.Groups)} {
		if err != nil {
			return nil, err
		}
	}
	for act, depth := raw["act"], 1; act != nil; depth++ {
		if depth > maxDepth {
			return nil, &ChainError{Reason: fmt.Sprintf("more than %d actors (act nested deeper than the limit)", maxDepth)}
		}
		obj, ok := act.(map[string]any)
		if !ok {
			return nil, &ChainError{Reason: fmt.Sprintf("act at depth %d is not an object", depth)}
		}
		sub, _ := obj["sub"].(string)
		if sub == "" {
			return nil, &ChainError{Reason: fmt.Sprintf("act at depth %d has no sub", depth)}
		}
		if err := checkClaimString("act.sub", sub); err != nil {
			return nil, err
		}
		r.Chain = append(r.Chain, sub)
		act = obj["act"]
	}
	switch {
	case len(r.Chain) > 0:
		r.Caller = r.Chain[0]
	case raw["client_id"] != nil:
		r.Caller, _ = raw["client_id"].(string)
		if err := checkClaimString("client_id", r.Caller); err != nil {
			return nil, err
		}
	default:
		r.Caller, _ = raw["azp"].(string)
		if err := checkClaimString("azp", r.Caller); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// scopeClaim names the claim the scopes were read from: scope, unless the token has only scp.
func scopeClaim(raw map[string]any) string {
	if _, ok := raw["scope"]; !ok && raw["scp"] != nil {
		return "scp"
	}
	return "scope"
}

// stringList reads a claim that is a string or a list of strings (aud, groups); other elements
// are left out.
func stringList(claim any) []string {
	switch v := claim.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
