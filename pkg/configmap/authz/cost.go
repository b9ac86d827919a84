package authz

import (
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
)

// The bounds of a request's facts. A token past them is refused by FromClaims (the inbound
// proxy answers 401 invalid_token naming the claim); Authorize checks every request against them
// before it runs a rule without cel-go's runtime cost tracker, since a rule's static cost
// (staticCost) holds only for requests within them. They are far above what an identity provider
// issues: OpenID Connect caps sub at 255 characters; a workload's SPIFFE ID here is
// spiffe://<trust domain>/ns/<namespace>/sa/<service account>, under 600 bytes with the longest
// names Kubernetes allows; Entra ID puts at most 200 groups in a token; and the inbound proxy
// refuses a token over 16 KiB, whose 12 KiB of claims cannot hold 512 scopes of more than about
// 20 characters anyway.
const (
	// MaxFactLength bounds, in bytes, each string fact: subject, caller, peer, request.method,
	// request.rpcMethod, and every entry of chain, scopes, audience and groups.
	MaxFactLength = 1024
	// MaxPathLength bounds request.path, in bytes (the 8 KiB request line most servers accept).
	MaxPathLength = 8192
	// MaxFactEntries bounds the entries of scopes, audience and groups.
	MaxFactEntries = 512
	// MaxChainDepth bounds the entries of chain: the largest maxChainDepth a configuration may
	// set (inbound.authorization.maxChainDepth).
	MaxChainDepth = 16
)

// ClaimError is a token whose claim is past the bounds of a request's facts.
type ClaimError struct {
	// Claim names the claim: sub, aud, groups, scope, client_id, azp, or act.sub.
	Claim  string
	Reason string
}

func (e *ClaimError) Error() string { return fmt.Sprintf("claim %q: %s", e.Claim, e.Reason) }

// checkClaimString refuses a string claim longer than MaxFactLength.
func checkClaimString(claim, s string) error {
	if len(s) > MaxFactLength {
		return &ClaimError{Claim: claim, Reason: fmt.Sprintf("%d bytes, more than %d", len(s), MaxFactLength)}
	}
	return nil
}

// checkClaimList refuses a list claim of more than MaxFactEntries entries or with an entry
// longer than MaxFactLength.
func checkClaimList(claim string, list []string) error {
	if len(list) > MaxFactEntries {
		return &ClaimError{Claim: claim, Reason: fmt.Sprintf("%d entries, more than %d", len(list), MaxFactEntries)}
	}
	for i, s := range list {
		if len(s) > MaxFactLength {
			return &ClaimError{Claim: claim, Reason: fmt.Sprintf("entry %d is %d bytes, more than %d", i, len(s), MaxFactLength)}
		}
	}
	return nil
}

// withinFactBounds reports whether every fact of r is within the bounds the rules' static costs
// were estimated for. A Request from FromClaims always is, but for a path or a JSON-RPC method
// past them; a Request built otherwise need not be.
func withinFactBounds(r *Request) bool {
	for _, s := range [...]string{r.Subject, r.Caller, r.Peer, r.Method, r.RPCMethod} {
		if len(s) > MaxFactLength {
			return false
		}
	}
	return len(r.Path) <= MaxPathLength && listWithin(r.Chain, MaxChainDepth) &&
		listWithin(r.Scopes, MaxFactEntries) && listWithin(r.Audience, MaxFactEntries) && listWithin(r.Groups, MaxFactEntries)
}

// listWithin reports whether list has at most entries entries, none longer than MaxFactLength.
func listWithin(list []string, entries int) bool {
	if len(list) > entries {
		return false
	}
	for _, s := range list {
		if len(s) > MaxFactLength {
			return false
		}
	}
	return true
}

// factBounds gives cel-go's cost estimator the size of each variable, and of each element of a
// list variable, from the bounds above (in CEL a string's size is its code points, at most its
// bytes). claims has none: it is a map of arbitrary JSON, which nothing bounds but the token's
// size.
type factBounds struct{}

func (factBounds) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	var limit uint64
	switch path := n.Path(); {
	case len(path) == 1:
		switch path[0] {
		case VarSubject, VarCaller, VarPeer, VarMethod, VarRPCMethod:
			limit = MaxFactLength
		case VarPath:
			limit = MaxPathLength
		case VarChain:
			limit = MaxChainDepth
		case VarScopes, VarAudience, VarGroups:
			limit = MaxFactEntries
		default:
			return nil
		}
	case len(path) == 2 && path[1] == "@items":
		switch path[0] {
		case VarChain, VarScopes, VarAudience, VarGroups:
			limit = MaxFactLength
		default:
			return nil
		}
	default:
		return nil
	}
	return &checker.SizeEstimate{Min: 0, Max: limit}
}

func (factBounds) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// staticCost is the cost of evaluating ast on any request within the fact bounds, in the units
// of cel-go's runtime cost tracker (the estimator bounds the tracker's count from above).
func staticCost(env *cel.Env, ast *cel.Ast) (checker.CostEstimate, error) {
	return env.EstimateCost(ast, factBounds{})
}

// staticallyBounded reports whether a rule's evaluation stays within MaxCost on every request
// within the fact bounds, so that it may run without the runtime cost tracker: it does not read
// claims, and its estimated worst case is at most MaxCost.
func staticallyBounded(env *cel.Env, ast *cel.Ast, readsClaims bool) bool {
	if readsClaims {
		return false
	}
	cost, err := staticCost(env, ast)
	return err == nil && cost.Max <= MaxCost
}
