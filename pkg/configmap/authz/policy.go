package authz

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// Effect is what a rule does when it matches, and what the policy does when none matches.
type Effect string

const (
	Allow Effect = "Allow"
	Deny  Effect = "Deny"
)

// Rule is one named rule of a policy: when the CEL expression When is true, Effect applies.
type Rule struct {
	Name   string
	Effect Effect
	When   string
}

// DefaultRule is the Decision.Rule of a request no rule matched.
const DefaultRule = "default"

// Bounds of a policy. The API and config.yaml hold the same (MaxRules items, MaxNameLength and
// MaxExpressionLength characters); MaxCost bounds one rule's evaluation, in cel-go's cost units
// (about one per operation and per element a comprehension visits), so that no expression can hold
// a request for long whatever the token carries: statically for a rule whose estimated worst case
// on facts within their bounds (cost.go) is at most MaxCost, by cel-go's runtime cost tracker for
// any other rule and for any request past those bounds.
const (
	MaxRules            = 64
	MaxNameLength       = 63
	MaxExpressionLength = 4096
	MaxCost             = 100_000
)

// The CEL variables a rule can use, each a verified fact (Request's fields; README of
// docs/authorization.md).
const (
	VarSubject   = "subject"
	VarCaller    = "caller"
	VarChain     = "chain"
	VarScopes    = "scopes"
	VarAudience  = "audience"
	VarGroups    = "groups"
	VarClaims    = "claims"
	VarMethod    = "request.method"
	VarPath      = "request.path"
	VarRPCMethod = "request.rpcMethod"
	VarPeer      = "peer"
)

// namePattern is what a rule's name must match: a DNS label, so that it reads well in a 403
// body, a log and a metric label. DefaultRule is reserved.
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NamePattern is namePattern's source (the CRD's marker says the same; a test compares them).
const NamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`

// Env is the CEL environment every rule is compiled in, by the admission webhook, the controller
// and the inbound proxy alike: the variables above, the standard library, and the strings and
// sets extensions (sets.contains, sets.intersects).
var Env = sync.OnceValues(func() (*cel.Env, error) {
	list := cel.ListType(cel.StringType)
	return cel.NewEnv(
		cel.Variable(VarSubject, cel.StringType),
		cel.Variable(VarCaller, cel.StringType),
		cel.Variable(VarChain, list),
		cel.Variable(VarScopes, list),
		cel.Variable(VarAudience, list),
		cel.Variable(VarGroups, list),
		cel.Variable(VarClaims, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(VarMethod, cel.StringType),
		cel.Variable(VarPath, cel.StringType),
		cel.Variable(VarRPCMethod, cel.StringType),
		cel.Variable(VarPeer, cel.StringType),
		ext.Strings(),
		ext.Sets(),
		cel.ParserExpressionSizeLimit(MaxExpressionLength),
	)
})

// RuleError is why one rule of a policy is refused: Field is name, effect or when.
type RuleError struct {
	Index   int
	Name    string
	Field   string
	Message string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("rules[%d].%s: rule %q %s", e.Index, e.Field, e.Name, e.Message)
}

// DefaultEffect is what applies when no rule matches and the policy sets no default: Deny as soon
// as one rule allows (the rules are then an allow-list: whatever they do not allow is refused),
// else Allow (deny rules carve exceptions out of today's behaviour, and no rules change nothing).
// Istio's AuthorizationPolicy decides the same way.
func DefaultEffect(rules []Rule) Effect {
	for _, r := range rules {
		if r.Effect == Allow {
			return Deny
		}
	}
	return Allow
}

// Policy is a compiled set of rules. Deny overrides allow: the first deny rule (in order) that
// matches denies; else the first allow rule that matches allows; else the default applies. A rule
// whose evaluation fails (a missing claim, the cost limit) denies, naming the rule: an error never
// lets a request through.
type Policy struct {
	deny, allow   []compiled
	def           Effect
	usesRPCMethod bool

	// question holds the rules' partial-evaluation programs (MayCall), built on the first
	// question: the inbound proxy never asks one.
	question struct {
		once sync.Once
		prgs map[string]cel.Program
		err  error
	}
}

type compiled struct {
	name string
	// matched is the Decision.Reason when the rule matches.
	matched string
	// prg is the program Authorize runs. For a bounded rule (staticallyBounded) it has no runtime
	// cost tracker, whose bookkeeping was most of a decision's allocations, and limited builds,
	// on first use, the program with the tracker for a request past the fact bounds; for any other
	// rule prg has the tracker and limited is nil.
	prg     cel.Program
	bounded bool
	limited func() (cel.Program, error)
	ast     *cel.Ast
}

// Compile compiles rules in Env, with def as the default (DefaultEffect(rules) when empty). The
// error joins a *RuleError for every rule that is refused (a bad name, a repeated name, an effect
// other than Allow or Deny, an expression that does not compile or is not a bool), or says why def
// is refused.
func Compile(rules []Rule, def Effect) (*Policy, error) {
	env, err := Env()
	if err != nil {
		return nil, fmt.Errorf("the CEL environment: %w", err)
	}
	if def == "" {
		def = DefaultEffect(rules)
	}
	var errs []error
	if def != Allow && def != Deny {
		errs = append(errs, fmt.Errorf("default: %q is not Allow or Deny", def))
	}
	if len(rules) > MaxRules {
		errs = append(errs, fmt.Errorf("rules: %d rules, more than %d", len(rules), MaxRules))
	}
	p := &Policy{def: def}
	seen := map[string]int{}
	for i, r := range rules {
		bad := func(field, format string, args ...any) {
			errs = append(errs, &RuleError{Index: i, Name: r.Name, Field: field, Message: fmt.Sprintf(format, args...)})
		}
		switch {
		case len(r.Name) > MaxNameLength || !namePattern.MatchString(r.Name):
			bad("name", "is not a name (at most %d lower-case letters, digits and '-', starting and ending with a letter or digit)", MaxNameLength)
		case r.Name == DefaultRule:
			bad("name", "is reserved: %q names the default in decisions", DefaultRule)
		default:
			if j, dup := seen[r.Name]; dup {
				bad("name", "repeats the name of rules[%d]", j)
			}
			seen[r.Name] = i
		}
		if r.Effect != Allow && r.Effect != Deny {
			bad("effect", "has effect %q, not Allow or Deny", r.Effect)
		}
		c, usesRPC, err := compileWhen(env, r.Name, r.When)
		if err != nil {
			bad("when", "does not compile: %v", err)
			continue
		}
		p.usesRPCMethod = p.usesRPCMethod || usesRPC
		if r.Effect == Deny {
			c.matched = fmt.Sprintf("denied by rule %q", r.Name)
			p.deny = append(p.deny, c)
		} else {
			c.matched = fmt.Sprintf("allowed by rule %q", r.Name)
			p.allow = append(p.allow, c)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// compileWhen compiles one rule's expression and reports whether it reads request.rpcMethod.
// A rule whose worst case on facts within their bounds is at most MaxCost, and that does not read
// claims, runs without the runtime cost tracker; any other keeps it.
func compileWhen(env *cel.Env, name, when string) (compiled, bool, error) {
	if strings.TrimSpace(when) == "" {
		return compiled{}, false, errors.New("the expression is empty")
	}
	if len(when) > MaxExpressionLength {
		return compiled{}, false, fmt.Errorf("the expression is longer than %d bytes", MaxExpressionLength)
	}
	ast, iss := env.Compile(when)
	if iss.Err() != nil {
		msgs := make([]string, 0, len(iss.Errors()))
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return compiled{}, false, errors.New(strings.Join(msgs, "; "))
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return compiled{}, false, fmt.Errorf("the expression is a %s, not a bool", t)
	}
	usesRPC, readsClaims := false, false
	for _, ref := range ast.NativeRep().ReferenceMap() {
		usesRPC = usesRPC || ref.Name == VarRPCMethod
		readsClaims = readsClaims || ref.Name == VarClaims
	}
	limited := func() (cel.Program, error) {
		return env.Program(ast, cel.CostLimit(MaxCost), cel.EvalOptions(cel.OptOptimize))
	}
	c := compiled{name: name, ast: ast, bounded: staticallyBounded(env, ast, readsClaims)}
	var err error
	if c.bounded {
		c.prg, err = env.Program(ast, cel.EvalOptions(cel.OptOptimize))
		c.limited = sync.OnceValues(limited)
	} else {
		c.prg, err = limited()
	}
	if err != nil {
		return compiled{}, false, err
	}
	return c, usesRPC, nil
}

// UsesRPCMethod reports whether a rule reads request.rpcMethod: only then does the inbound proxy
// read a request's body to find it.
func (p *Policy) UsesRPCMethod() bool { return p.usesRPCMethod }

// Default is the effect of a request no rule matches.
func (p *Policy) Default() Effect { return p.def }

// Authorize decides on r. It never returns an error: a rule that cannot be evaluated is a denial
// naming it.
func (p *Policy) Authorize(_ context.Context, r *Request) (Decision, error) {
	vars := activations.Get().(*activation)
	vars.r = r
	defer vars.release()
	// The rules' static costs hold for facts within their bounds only: past them, every rule runs
	// with the runtime cost limit.
	limited := !withinFactBounds(r)
	if d, decided := firstMatch(p.deny, false, vars, limited); decided {
		return d, nil
	}
	if d, decided := firstMatch(p.allow, true, vars, limited); decided {
		return d, nil
	}
	if p.def == Allow {
		return Decision{Allowed: true, Rule: DefaultRule, Reason: "no rule matched; the default allows"}, nil
	}
	return Decision{Rule: DefaultRule, Reason: "no rule matched; the default denies"}, nil
}

// firstMatch evaluates rules in order: the first that matches decides (allowed, what a match
// means), and so does the first that cannot be evaluated (a denial naming it). decided is false
// when no rule matched.
func firstMatch(rules []compiled, allowed bool, vars *activation, limited bool) (d Decision, decided bool) {
	for i := range rules {
		c := &rules[i]
		match, err := c.eval(vars, limited)
		if err != nil {
			return Decision{Rule: c.name, Reason: err.Error()}, true
		}
		if match {
			return Decision{Allowed: allowed, Rule: c.name, Reason: c.matched}, true
		}
	}
	return Decision{}, false
}

// eval evaluates the rule; limited: with the runtime cost limit whether or not it is bounded.
func (c *compiled) eval(vars *activation, limited bool) (bool, error) {
	prg := c.prg
	if limited && c.limited != nil {
		var err error
		if prg, err = c.limited(); err != nil {
			return false, fmt.Errorf("rule %q could not be evaluated: %v", c.name, err)
		}
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("rule %q could not be evaluated: %v", c.name, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("rule %q could not be evaluated: it gave a %s, not a bool", c.name, out.Type().TypeName())
	}
	return b, nil
}

// activation gives the rules the request's facts, each converted to a CEL value once per
// request, when a rule first reads it.
type activation struct {
	r    *Request
	vals [len(variables)]ref.Val
}

// activations are reused from one decision to the next: a decision's allocations, few as they
// are, are what its latency's tail follows (the collector's work and fresh memory), and the
// activation with its cache was half of their bytes.
var activations = sync.Pool{New: func() any { return new(activation) }}

// release clears a and returns it to activations. Nothing of a outlives a decision: a rule's
// result is a bool, and an error's message is formatted when it is made.
func (a *activation) release() {
	*a = activation{}
	activations.Put(a)
}

// variables are the names activation resolves, in the order of its cache.
var variables = [...]string{VarSubject, VarCaller, VarChain, VarScopes, VarAudience, VarGroups, VarClaims, VarMethod, VarPath, VarRPCMethod, VarPeer}

func (a *activation) ResolveName(name string) (any, bool) {
	i := slices.Index(variables[:], name)
	if i < 0 {
		return nil, false
	}
	if a.vals[i] == nil {
		a.vals[i] = a.value(name)
	}
	return a.vals[i], true
}

func (a *activation) value(name string) ref.Val {
	r, adapter := a.r, types.DefaultTypeAdapter
	switch name {
	case VarSubject:
		return types.String(r.Subject)
	case VarCaller:
		return types.String(r.Caller)
	case VarChain:
		return types.NewStringList(adapter, nonNil(r.Chain))
	case VarScopes:
		return types.NewStringList(adapter, nonNil(r.Scopes))
	case VarAudience:
		return types.NewStringList(adapter, nonNil(r.Audience))
	case VarGroups:
		return types.NewStringList(adapter, nonNil(r.Groups))
	case VarClaims:
		if r.Claims == nil {
			return types.NewStringInterfaceMap(adapter, map[string]any{})
		}
		return types.NewStringInterfaceMap(adapter, r.Claims)
	case VarMethod:
		return types.String(r.Method)
	case VarPath:
		return types.String(r.Path)
	case VarPeer:
		return types.String(r.Peer)
	default: // VarRPCMethod
		return types.String(r.RPCMethod)
	}
}

func (*activation) Parent() interpreter.Activation { return nil }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
