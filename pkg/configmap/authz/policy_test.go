package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sample is a request of user alice through caller → middle to this agent.
func sample() *Request {
	return &Request{
		Subject:   "alice",
		Caller:    "spiffe://cluster.local/ns/agents/sa/middle",
		Chain:     []string{"spiffe://cluster.local/ns/agents/sa/middle", "spiffe://cluster.local/ns/agents/sa/caller"},
		Scopes:    []string{"openid", "agent:invoke"},
		Audience:  []string{"spiffe://cluster.local/ns/agents/sa/callee"},
		Groups:    []string{"/finance", "/staff"},
		Claims:    map[string]any{"tenant": "acme", "email_verified": true},
		Method:    "POST",
		Path:      "/",
		RPCMethod: "tasks/get",
	}
}

func decide(t *testing.T, rules []Rule, def Effect, r *Request) Decision {
	t.Helper()
	p, err := Compile(rules, def)
	require.NoError(t, err)
	d, err := p.Authorize(context.Background(), r)
	require.NoError(t, err, "a policy never fails to decide")
	return d
}

// Every variable of the CEL surface carries the request's fact, in every form a rule is written.
func TestRulesSeeTheVerifiedFacts(t *testing.T) {
	for _, when := range []string{
		`subject == "alice"`,
		`caller == "spiffe://cluster.local/ns/agents/sa/middle"`,
		`caller.startsWith("spiffe://cluster.local/ns/agents/")`,
		`chain.size() == 2 && chain[1].endsWith("/sa/caller")`,
		`"spiffe://cluster.local/ns/agents/sa/caller" in chain`,
		`chain.all(a, a.startsWith("spiffe://cluster.local/"))`,
		`"agent:invoke" in scopes`,
		`sets.contains(scopes, ["openid", "agent:invoke"])`,
		`audience == ["spiffe://cluster.local/ns/agents/sa/callee"]`,
		`sets.intersects(groups, ["/finance", "/audit"])`,
		`claims.tenant == "acme" && claims.email_verified == true`,
		`has(claims.tenant) && !has(claims.department)`,
		`request.method == "POST" && request.path == "/"`,
		`request.rpcMethod in ["tasks/get", "tasks/list"]`,
		`request.path.matches("^/(tasks)?$")`,
		`subject.lowerAscii() == "alice"`,
	} {
		t.Run(when, func(t *testing.T) {
			d := decide(t, []Rule{{Name: "r", Effect: Allow, When: when}}, Deny, sample())
			assert.Equal(t, Decision{Allowed: true, Rule: "r", Reason: `allowed by rule "r"`}, d)
		})
	}
}

// A request without a chain, groups or claims sees empty lists and an empty map, not errors.
func TestAbsentFactsAreEmpty(t *testing.T) {
	d := decide(t, []Rule{{Name: "r", Effect: Allow, When: `chain == [] && groups == [] && scopes == [] && audience == [] && claims == {} && request.rpcMethod == ""`}}, Deny, &Request{})
	assert.True(t, d.Allowed, d.Reason)
}

// A decision sees its own request's facts only, though decisions reuse their activations: one
// after the other, and many at once.
func TestADecisionSeesOnlyItsOwnRequest(t *testing.T) {
	p, err := Compile([]Rule{{Name: "alice", Effect: Allow, When: `subject == "alice" && "agent:invoke" in scopes`}}, Deny)
	require.NoError(t, err)
	ctx := context.Background()
	alice, bob := sample(), sample()
	bob.Subject = "bob"
	for range 3 {
		d, _ := p.Authorize(ctx, alice)
		require.True(t, d.Allowed, d.Reason)
		d, _ = p.Authorize(ctx, bob)
		require.False(t, d.Allowed, "bob is not alice, whatever the decision before")
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := sample()
			if i%2 == 1 {
				r.Subject = "bob"
			}
			for range 200 {
				if d, _ := p.Authorize(ctx, r); d.Allowed != (i%2 == 0) {
					t.Errorf("%s: %+v", r.Subject, d)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Deny overrides allow: a matching deny rule wins over a matching allow rule written before it.
func TestDenyOverridesAllow(t *testing.T) {
	rules := []Rule{
		{Name: "staff", Effect: Allow, When: `"/staff" in groups`},
		{Name: "no-direct-caller", Effect: Deny, When: `caller.endsWith("/sa/caller")`},
		{Name: "no-writes", Effect: Deny, When: `request.rpcMethod == "message/send"`},
	}
	r := sample()
	assert.Equal(t, "staff", decide(t, rules, "", r).Rule, "no deny matches: the allow decides")

	r.RPCMethod = "message/send"
	d := decide(t, rules, "", r)
	assert.False(t, d.Allowed)
	assert.Equal(t, "no-writes", d.Rule)
	assert.Equal(t, `denied by rule "no-writes"`, d.Reason)

	r.Caller = "spiffe://cluster.local/ns/agents/sa/caller"
	assert.Equal(t, "no-direct-caller", decide(t, rules, "", r).Rule, "the first matching deny, in order")
}

// Among allow rules the first that matches is named.
func TestFirstMatchingAllowIsNamed(t *testing.T) {
	rules := []Rule{
		{Name: "never", Effect: Allow, When: `false`},
		{Name: "alice", Effect: Allow, When: `subject == "alice"`},
		{Name: "everyone", Effect: Allow, When: `true`},
	}
	assert.Equal(t, "alice", decide(t, rules, "", sample()).Rule)
}

// The default of the default: no rules, or deny rules only, keep today's behaviour (allow); as
// soon as one rule allows, the rules are an allow-list and the default denies. An explicit
// default wins either way.
func TestTheDefaultFollowsTheRules(t *testing.T) {
	allowBob := Rule{Name: "bob", Effect: Allow, When: `subject == "bob"`}
	denyBob := Rule{Name: "not-bob", Effect: Deny, When: `subject == "bob"`}
	for name, tc := range map[string]struct {
		rules   []Rule
		def     Effect
		allowed bool
	}{
		"no rules":                     {nil, "", true},
		"deny rules only":              {[]Rule{denyBob}, "", true},
		"an allow rule":                {[]Rule{allowBob}, "", false},
		"allow and deny rules":         {[]Rule{denyBob, allowBob}, "", false},
		"explicit Allow with an allow": {[]Rule{allowBob}, Allow, true},
		"explicit Deny, no rules":      {nil, Deny, false},
		"explicit Deny, deny rules":    {[]Rule{denyBob}, Deny, false},
	} {
		t.Run(name, func(t *testing.T) {
			d := decide(t, tc.rules, tc.def, sample())
			assert.Equal(t, tc.allowed, d.Allowed)
			assert.Equal(t, DefaultRule, d.Rule)
			assert.Contains(t, d.Reason, "no rule matched")
		})
	}
	assert.Equal(t, Deny, DefaultEffect([]Rule{denyBob, allowBob}))
	assert.Equal(t, Allow, DefaultEffect([]Rule{denyBob}))
}

// A rule that cannot be evaluated denies, naming the rule, whatever its effect and whatever the
// rules after it would say.
func TestAnEvaluationErrorDeniesNamingTheRule(t *testing.T) {
	for name, rules := range map[string][]Rule{
		"deny rule, missing claim": {
			{Name: "tenant-check", Effect: Deny, When: `claims.department == "sales"`},
			{Name: "everyone", Effect: Allow, When: `true`},
		},
		"allow rule, missing claim": {
			{Name: "tenant-check", Effect: Allow, When: `claims.department == "sales"`},
			{Name: "everyone", Effect: Allow, When: `true`},
		},
		"not a bool at run time": {
			{Name: "tenant-check", Effect: Allow, When: `claims.tenant`},
		},
		"index out of range": {
			{Name: "tenant-check", Effect: Allow, When: `chain[5] == "x"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := decide(t, rules, Allow, sample())
			assert.False(t, d.Allowed)
			assert.Equal(t, "tenant-check", d.Rule)
			assert.Contains(t, d.Reason, `rule "tenant-check" could not be evaluated`)
		})
	}
}

// An expression whose evaluation would cost more than MaxCost stops there and denies: a token
// with a long claim cannot hold the proxy.
func TestTheCostLimitDenies(t *testing.T) {
	big := make([]any, 2000)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	r := sample()
	r.Claims = map[string]any{"big": big}
	d := decide(t, []Rule{{Name: "quadratic", Effect: Allow, When: `claims.big.all(a, claims.big.all(b, a == b || a != b))`}}, Allow, r)
	assert.False(t, d.Allowed)
	assert.Equal(t, "quadratic", d.Rule)
	assert.Contains(t, d.Reason, "cost limit exceeded")
}

// Compile refuses a bad rule with its index, name and field, and reports every bad rule at once.
func TestCompileRefusesBadRulesNamingThem(t *testing.T) {
	for name, tc := range map[string]struct {
		rule   Rule
		field  string
		reason string
	}{
		"undeclared variable": {Rule{Name: "r", Effect: Allow, When: `user == "alice"`}, "when", "undeclared reference to 'user'"},
		"typo in request":     {Rule{Name: "r", Effect: Allow, When: `request.mthod == "GET"`}, "when", "undeclared reference to 'request'"},
		"syntax error":        {Rule{Name: "r", Effect: Allow, When: `subject ==`}, "when", "1:11: Syntax error: mismatched input"},
		"not a bool":          {Rule{Name: "r", Effect: Allow, When: `subject`}, "when", "is a string, not a bool"},
		"wrong types":         {Rule{Name: "r", Effect: Allow, When: `scopes == "read"`}, "when", "no matching overload"},
		"empty":               {Rule{Name: "r", Effect: Allow, When: ` `}, "when", "the expression is empty"},
		"too long":            {Rule{Name: "r", Effect: Allow, When: strings.Repeat(" ", MaxExpressionLength) + "true"}, "when", "longer than 4096"},
		"bad name":            {Rule{Name: "Only_Middle", Effect: Allow, When: `true`}, "name", "is not a name"},
		"reserved name":       {Rule{Name: "default", Effect: Allow, When: `true`}, "name", "is reserved"},
		"bad effect":          {Rule{Name: "r", Effect: "allow", When: `true`}, "effect", `has effect "allow", not Allow or Deny`},
	} {
		t.Run(name, func(t *testing.T) {
			ok := Rule{Name: "fine", Effect: Allow, When: `true`}
			_, err := Compile([]Rule{ok, ok, tc.rule}, "")
			var re *RuleError
			require.True(t, errors.As(err, &re), "got %v", err)
			// the repeated name of rules[1] is reported too
			assert.Contains(t, err.Error(), `rules[1].name: rule "fine" repeats the name of rules[0]`)
			assert.Contains(t, err.Error(), fmt.Sprintf("rules[2].%s: rule %q", tc.field, tc.rule.Name))
			assert.Contains(t, err.Error(), tc.reason)
		})
	}
	_, err := Compile(nil, "allow")
	assert.ErrorContains(t, err, `default: "allow" is not Allow or Deny`)
	_, err = Compile(slices.Repeat([]Rule{{Name: "r", Effect: Allow, When: "true"}}, MaxRules+1), "")
	assert.ErrorContains(t, err, "65 rules, more than 64")
}

// Only a policy that reads request.rpcMethod needs the request body.
func TestUsesRPCMethod(t *testing.T) {
	p, err := Compile([]Rule{{Name: "r", Effect: Allow, When: `request.method == "rpcMethod" || "request.rpcMethod" in scopes`}}, "")
	require.NoError(t, err)
	assert.False(t, p.UsesRPCMethod(), "the name in a string is not a use")
	p, err = Compile([]Rule{{Name: "a", Effect: Allow, When: `true`}, {Name: "b", Effect: Deny, When: `request.rpcMethod.startsWith("message/")`}}, "")
	require.NoError(t, err)
	assert.True(t, p.UsesRPCMethod())
}

// FuzzPolicy: no expression, compiled or not, and no request makes Compile or Authorize panic;
// and a rule that runs without the runtime cost tracker decides as it would with it, which never
// stops it, on any request within the fact bounds.
func FuzzPolicy(f *testing.F) {
	for _, s := range []string{`true`, `subject == caller`, `chain.exists(c, c.matches("^x+$"))`, `claims.a.b[0] > 1`,
		`size(request.path) / 0 == 1`, `sets.intersects(groups, scopes)`, `"a".repeat(100) == subject`, `[1,2][3] == 1`,
		`chain.map(c, c + subject + c).exists(s, s.contains(request.path))`, `subject.split("").all(a, caller.split("").exists(b, a == b))`,
		`request.path.matches(subject)`, `[chain, [subject, caller]].exists(l, l.all(e, e.indexOf(caller) >= 0))`,
		`chain.map(c, c + subject).exists(s, s.startsWith(caller))`, `chain.all(a, a.lowerAscii().endsWith(request.path))`} {
		f.Add(s, "alice", "spiffe://x", "/p")
	}
	f.Fuzz(func(t *testing.T, when, sub, caller, path string) {
		p, err := Compile([]Rule{{Name: "r", Effect: Allow, When: when}}, Deny)
		if err != nil {
			return
		}
		r := &Request{Subject: sub, Caller: caller, Chain: []string{caller}, Path: path, Claims: map[string]any{"a": map[string]any{"b": []any{2.0}}}}
		if _, err := p.Authorize(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		c := &p.allow[0]
		if !c.bounded || !withinFactBounds(r) {
			return
		}
		match, err := c.eval(&activation{r: r}, false)
		limitedMatch, limitedErr := c.eval(&activation{r: r}, true)
		if limitedErr != nil && strings.Contains(limitedErr.Error(), "cost limit exceeded") {
			t.Fatalf("%s: statically bounded, yet the runtime limit stops it: %v", when, limitedErr)
		}
		assert.Equal(t, limitedMatch, match, when)
		assert.Equal(t, limitedErr, err, when)
	})
}

// tenRules is a policy of the size the benchmark names: deny rules, then allow rules,
// the allowing one last, so that a request evaluates all ten.
func tenRules() []Rule {
	rules := []Rule{
		{Name: "no-banned-subject", Effect: Deny, When: `subject in ["mallory", "eve"]`},
		{Name: "no-deep-chain", Effect: Deny, When: `chain.size() > 4`},
		{Name: "no-foreign-caller", Effect: Deny, When: `!caller.startsWith("spiffe://cluster.local/")`},
		{Name: "no-admin-path", Effect: Deny, When: `request.path.startsWith("/admin")`},
		{Name: "no-cancel-for-guests", Effect: Deny, When: `request.rpcMethod == "tasks/cancel" && "/guests" in groups`},
	}
	for i := range 4 {
		rules = append(rules, Rule{Name: fmt.Sprintf("partner-%d", i), Effect: Allow,
			When: fmt.Sprintf(`caller == "spiffe://cluster.local/ns/partner-%d/sa/agent" && "agent:invoke" in scopes`, i)})
	}
	return append(rules, Rule{Name: "through-middle", Effect: Allow,
		When: `chain.size() >= 1 && chain[0] == "spiffe://cluster.local/ns/agents/sa/middle" && request.rpcMethod in ["tasks/get", "message/send"]`})
}

// BenchmarkAuthorize is one decision in-process on a 10-rule policy that evaluates every rule,
// with per-decision latency percentiles, in a warm process: before it is timed the process makes
// warmDecisions decisions, since a fresh process's first ones fault its heap in, and on a virtual
// machine a page's first touch costs 15–100 µs (the p99 of 100,000 decisions of a cold process
// was that, not the decision's). An auth-proxy serves for hours.
func BenchmarkAuthorize(b *testing.B) {
	p, err := Compile(tenRules(), "")
	require.NoError(b, err)
	r, ctx := sample(), context.Background()
	lat := make([]time.Duration, 0, 1<<20)
	const warmDecisions = 100_000
	for range warmDecisions {
		_, _ = p.Authorize(ctx, r)
	}
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		d, _ := p.Authorize(ctx, r)
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
		if !d.Allowed || d.Rule != "through-middle" {
			b.Fatalf("%+v", d)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkCompile is the cost of a configuration change (once per config version).
func BenchmarkCompile(b *testing.B) {
	rules := tenRules()
	for b.Loop() {
		if _, err := Compile(rules, ""); err != nil {
			b.Fatal(err)
		}
	}
}
