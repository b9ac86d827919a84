package authz

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"sigs.k8s.io/yaml"
)

// AccessResult answers "may this caller call this agent?" for every direct call from the caller.
type AccessResult string

const (
	// AccessAllow: every direct call from the caller is allowed, whoever the user and whatever
	// the token's scopes and the request.
	AccessAllow AccessResult = "allow"
	// AccessDeny: no direct call from the caller is allowed.
	AccessDeny AccessResult = "deny"
	// AccessConditional: it depends on facts only a real request holds (Access.Needs), or on an
	// external authorizer.
	AccessConditional AccessResult = "conditional"
	// AccessUnknown: the policy the workload runs is not known here (a federated card, a
	// config.yaml the data plane refused and so does not run).
	AccessUnknown AccessResult = "unknown"
)

// Access is the answer to the question, with what decides it.
type Access struct {
	Result AccessResult `json:"result"`
	// Rules are the rules that decide, in evaluation order ("default" when the default does).
	Rules []string `json:"rules,omitempty"`
	// Needs are the facts of a real request the decision depends on (subject, scopes,
	// request.rpcMethod…), sorted.
	Needs []string `json:"needs,omitempty"`
	// DryRun: the policy is logged, not enforced, so every call is allowed; Reason says what the
	// policy would answer.
	DryRun bool   `json:"dryRun,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Caller is who asks: a workload calling the agent directly, so the data plane's caller is ID
// and chain is [ID].
type Caller struct {
	// ID is the caller's SPIFFE ID.
	ID string
	// Peer is what the peer variable holds on the call, when that is known (the workload accepts
	// mTLS connections only, so peer is the caller's SPIFFE ID); nil when it is not (peer is "" on
	// plain HTTP).
	Peer *string
}

// The facts a question leaves unknown: those of the user's token and of the request. caller,
// chain and (when known) peer are the caller's.
var unknownFacts = []string{VarSubject, VarScopes, VarAudience, VarGroups, VarClaims, VarMethod, VarPath, VarRPCMethod}

// MayCall answers for every direct call from c, following Authorize exactly: each rule is
// evaluated with the caller's facts known and the others unknown (CEL's partial evaluation); a
// rule whose value depends on an unknown may match, not match, or fail (and a failure denies),
// so the answer is allow or deny only when every way the unknowns can turn out leads to it.
func (p *Policy) MayCall(c Caller) Access {
	prgs, err := p.questionPrograms()
	if err != nil {
		return Access{Result: AccessUnknown, Reason: err.Error()}
	}
	known := map[string]any{VarCaller: c.ID, VarChain: []string{c.ID}}
	unknowns := slices.Clone(unknownFacts)
	if c.Peer != nil {
		known[VarPeer] = *c.Peer
	} else {
		unknowns = append(unknowns, VarPeer)
	}
	patterns := make([]*cel.AttributePatternType, len(unknowns))
	for i, u := range unknowns {
		patterns[i] = cel.AttributePattern(u)
	}
	vars, err := cel.PartialVars(known, patterns...)
	if err != nil {
		return Access{Result: AccessUnknown, Reason: err.Error()}
	}

	var allow, deny bool // the outcomes some request from c can have
	var rules []string
	needs := map[string]bool{}
	decided := false
	walk := func(rs []compiled, effect Effect) {
		for _, r := range rs {
			if decided {
				return
			}
			out, _, err := prgs[r.name].Eval(vars)
			var match, isBool bool
			if err == nil {
				match, isBool = out.Value().(bool)
			}
			switch {
			case err == nil && types.IsUnknown(out):
				rules = append(rules, r.name)
				u := out.(*types.Unknown)
				for _, id := range u.IDs() {
					trails, _ := u.GetAttributeTrails(id)
					for _, t := range trails {
						needs[t.Variable()] = true
					}
				}
				// It may match, and it may fail on a request's facts (a claim that is not there):
				// a failure denies whatever the effect.
				deny = true
				allow = allow || effect == Allow
			case err != nil || !isBool: // fails on every request from c: denies, as Authorize does
				rules, deny, decided = append(rules, r.name), true, true
			case match:
				rules, decided = append(rules, r.name), true
				allow, deny = allow || effect == Allow, deny || effect == Deny
			}
		}
	}
	walk(p.deny, Deny)
	walk(p.allow, Allow)
	if !decided {
		rules = append(rules, DefaultRule)
		allow, deny = allow || p.def == Allow, deny || p.def == Deny
	}
	a := Access{Rules: rules}
	for n := range needs {
		a.Needs = append(a.Needs, n)
	}
	slices.Sort(a.Needs)
	switch {
	case allow && deny:
		a.Result = AccessConditional
		a.Reason = fmt.Sprintf("rules %s decide on %s", quoteAll(rules), strings.Join(a.Needs, ", "))
	case allow:
		a.Result, a.Needs = AccessAllow, nil
		a.Reason = fmt.Sprintf("allowed by %s", ruleNames(rules))
	default:
		a.Result, a.Needs = AccessDeny, nil
		a.Reason = fmt.Sprintf("denied by %s", ruleNames(rules))
	}
	return a
}

// questionPrograms compiles the rules for partial evaluation, once.
func (p *Policy) questionPrograms() (map[string]cel.Program, error) {
	q := &p.question
	q.once.Do(func() {
		env, err := Env()
		if err != nil {
			q.err = err
			return
		}
		q.prgs = make(map[string]cel.Program, len(p.deny)+len(p.allow))
		for _, r := range slices.Concat(p.deny, p.allow) {
			prg, err := env.Program(r.ast, cel.CostLimit(MaxCost), cel.EvalOptions(cel.OptPartialEval))
			if err != nil {
				q.err = fmt.Errorf("rule %q: %w", r.name, err)
				return
			}
			q.prgs[r.name] = prg
		}
	})
	return q.prgs, q.err
}

func ruleNames(rules []string) string {
	if len(rules) == 1 {
		if rules[0] == DefaultRule {
			return "the default (no rule matches)"
		}
		return fmt.Sprintf("rule %q", rules[0])
	}
	return "rules " + quoteAll(rules)
}

func quoteAll(rules []string) string {
	q := make([]string, len(rules))
	for i, r := range rules {
		q[i] = fmt.Sprintf("%q", r)
	}
	return strings.Join(q, ", ")
}

// WorkloadPolicy is what the question needs of a workload's config.yaml (ConfigMap
// {workload}-token-exchange, as the tokenexchange controller writes it): the policy compiled once,
// and the settings around it that change the answer. The zero of *WorkloadPolicy, nil, is a
// workload without a TokenExchange.
type WorkloadPolicy struct {
	policy *Policy
	// off says why auth-proxy applies no policy ("" when it does).
	off            string
	dryRun         bool
	external       bool
	requiredScopes bool
	strictMTLS     bool
	// err is why the data plane refuses this config.yaml: it then runs its last good
	// configuration, which is not known here.
	err error
}

// workloadConfig is the part of config.yaml the question reads; the rest is left to the data
// plane.
type workloadConfig struct {
	Inbound *struct {
		Enabled    *bool `json:"enabled"`
		Validation *struct {
			Enabled        *bool    `json:"enabled"`
			RequiredScopes []string `json:"requiredScopes"`
		} `json:"validation"`
		Authorization *Spec `json:"authorization"`
	} `json:"inbound"`
	MTLS *struct {
		Mode string `json:"mode"`
	} `json:"mtls"`
}

// MTLSStrict is the mtls.mode in which auth-proxy accepts mTLS connections only, so that peer is
// the caller's SPIFFE ID on every call.
const MTLSStrict = "strict"

// ParseWorkloadPolicy reads config.yaml and compiles its policy. It never fails: a config.yaml the
// data plane would refuse gives a WorkloadPolicy whose answers are AccessUnknown, naming why.
// Settings config.yaml leaves out keep the injector's defaults, under which auth-proxy validates
// tokens and applies the policy.
func ParseWorkloadPolicy(configYAML []byte) *WorkloadPolicy {
	var doc workloadConfig
	if err := yaml.Unmarshal(configYAML, &doc); err != nil {
		return &WorkloadPolicy{err: fmt.Errorf("config.yaml: %w", err)}
	}
	w := &WorkloadPolicy{strictMTLS: doc.MTLS != nil && doc.MTLS.Mode == MTLSStrict}
	in := doc.Inbound
	switch {
	case in == nil:
	case in.Enabled != nil && !*in.Enabled:
		w.off = "inbound is disabled (inbound.enabled false): auth-proxy applies no policy"
	case in.Validation != nil && in.Validation.Enabled != nil && !*in.Validation.Enabled:
		w.off = "inbound token validation is disabled (inbound.validation.enabled false): auth-proxy applies no policy"
	}
	if in != nil && in.Validation != nil {
		w.requiredScopes = len(in.Validation.RequiredScopes) > 0
	}
	spec := &Spec{}
	if in != nil && in.Authorization != nil {
		spec = in.Authorization
	}
	w.dryRun = spec.DryRun != nil && *spec.DryRun
	w.external = spec.External != nil
	rules := make([]Rule, len(spec.Rules))
	for i, r := range spec.Rules {
		rules[i] = Rule{Name: r.Name, Effect: Effect(r.Effect), When: r.When}
	}
	p, err := Compile(rules, Effect(spec.Default))
	if err != nil {
		w.err = fmt.Errorf("inbound.authorization: %w", err)
		return w
	}
	w.policy = p
	return w
}

// MayCall answers for every direct call from the workload whose SPIFFE ID is callerID, as
// auth-proxy decides: no policy allows; a dry run allows (saying what the policy would answer);
// the rules' answer (Policy.MayCall) otherwise, conditional where they would allow and an
// external authorizer or required scopes decide too.
func (w *WorkloadPolicy) MayCall(callerID string) Access {
	switch {
	case w == nil:
		return Access{Result: AccessAllow, Rules: []string{DefaultRule}, Reason: "no TokenExchange: auth-proxy applies no policy"}
	case w.off != "":
		return Access{Result: AccessAllow, Reason: w.off}
	case w.err != nil:
		return Access{Result: AccessUnknown, Reason: "the data plane refuses this configuration and runs its last good one: " + w.err.Error()}
	}
	c := Caller{ID: callerID}
	if w.strictMTLS {
		c.Peer = &callerID
	}
	a := w.policy.MayCall(c)
	if w.external && a.Result != AccessDeny {
		a.Result = AccessConditional
		a.Rules = append(a.Rules, ExternalRule)
		a.Reason += "; then the external authorizer decides"
	}
	if w.dryRun {
		a = Access{Result: AccessAllow, Rules: a.Rules, Needs: a.Needs, DryRun: true,
			Reason: fmt.Sprintf("dry run: the policy is logged, not enforced; it would answer %s (%s)", a.Result, a.Reason)}
	}
	if w.requiredScopes && a.Result != AccessDeny { // validation, before the policy and not relaxed by a dry run
		a.Result = AccessConditional
		a.Needs = mergeNeeds(a.Needs, VarScopes)
		a.Reason += "; the token must carry inbound.validation.requiredScopes"
	}
	return a
}

// ExternalRule names the external authorizer among the rules of an answer.
const ExternalRule = "external"

func mergeNeeds(needs []string, more ...string) []string {
	for _, m := range more {
		if !slices.Contains(needs, m) {
			needs = append(needs, m)
		}
	}
	slices.Sort(needs)
	return needs
}
