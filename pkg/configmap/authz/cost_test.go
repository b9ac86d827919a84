package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rulesOf is every compiled rule of p, deny rules first.
func rulesOf(p *Policy) []compiled {
	return append(append([]compiled{}, p.deny...), p.allow...)
}

// The rules people write, the ten among them, cost at most MaxCost on any request within
// the fact bounds: they run without the runtime cost tracker.
func TestTypicalRulesAreStaticallyBounded(t *testing.T) {
	rules := tenRules()
	for i, when := range []string{
		`"spiffe://cluster.local/ns/agents/sa/caller" in chain`,
		`chain.all(a, a.startsWith("spiffe://cluster.local/"))`,
		`sets.contains(scopes, ["openid", "agent:invoke"])`,
		`sets.intersects(groups, ["/finance", "/audit"])`,
		`audience.exists(a, a.endsWith("/sa/callee"))`,
		`request.path.matches("^/tasks/[^/]+$")`,
		`request.method in ["GET", "HEAD"] && peer != ""`,
		`subject.lowerAscii() == "alice"`,
		`groups.exists(g, g.contains("fin"))`,
	} {
		rules = append(rules, Rule{Name: fmt.Sprintf("typical-%d", i), Effect: Allow, When: when})
	}
	p, err := Compile(rules, "")
	require.NoError(t, err)
	for _, c := range rulesOf(p) {
		assert.True(t, c.bounded, "rule %q: %s", c.name, c.ast.Source().Content())
		assert.NotNil(t, c.limited, "rule %q keeps a limited program for requests past the bounds", c.name)
	}
}

// A rule that reads claims (arbitrary JSON, which nothing bounds but the token's size), or whose
// worst case on facts within their bounds exceeds MaxCost, keeps the runtime cost tracker.
func TestRulesOverClaimsOrPastMaxCostKeepTheRuntimeLimit(t *testing.T) {
	for _, when := range []string{
		`claims.big.all(a, claims.big.all(b, a == b || a != b))`,
		`has(claims.tenant)`,
		`claims.tenant == "acme"`,
		`groups.all(a, groups.all(b, a == b || a != b))`,
		`scopes.exists(s, groups.exists(g, audience.exists(a, s + g == a)))`,
	} {
		t.Run(when, func(t *testing.T) {
			p, err := Compile([]Rule{{Name: "r", Effect: Allow, When: when}}, "")
			require.NoError(t, err)
			assert.False(t, p.allow[0].bounded)
		})
	}
}

// TestTheCostLimitDenies, on facts within their bounds: a rule past MaxCost still stops at the
// limit and denies, though FromClaims accepts the token.
func TestTheCostLimitDeniesOnFactsWithinTheirBounds(t *testing.T) {
	groups := make([]any, MaxFactEntries)
	for i := range groups {
		groups[i] = fmt.Sprintf("/group-%d", i)
	}
	r, err := FromClaims(map[string]any{"sub": "alice", "groups": groups}, nil, 0)
	require.NoError(t, err, "the token is within the bounds")
	d := decide(t, []Rule{{Name: "quadratic", Effect: Allow, When: `groups.all(a, groups.all(b, a == b || a != b))`}}, Allow, r)
	assert.False(t, d.Allowed)
	assert.Equal(t, "quadratic", d.Rule)
	assert.Contains(t, d.Reason, "cost limit exceeded")
}

// A request past the fact bounds (a Request built by hand, a path longer than MaxPathLength) is
// outside what a rule's static cost covers: its rules run with the runtime cost limit.
func TestARequestPastTheFactBoundsRunsWithTheCostLimit(t *testing.T) {
	rule := Rule{Name: "path-regex", Effect: Allow, When: `request.path.matches("^(/[a-z]+)+/tasks$")`}
	p, err := Compile([]Rule{rule}, Allow)
	require.NoError(t, err)
	require.True(t, p.allow[0].bounded, "bounded on paths within MaxPathLength")

	r := sample()
	r.Path = strings.Repeat("/abcdefgh", MaxPathLength/9)
	d, err := p.Authorize(context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, "default", d.Rule, "within the bounds the rule runs and does not match: %s", d.Reason)

	r.Path = strings.Repeat("/abcdefgh", 4*MaxPathLength)
	d, err = p.Authorize(context.Background(), r)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "path-regex", d.Rule)
	assert.Contains(t, d.Reason, "cost limit exceeded")

	for name, past := range map[string]func(*Request){
		"subject":  func(r *Request) { r.Subject = strings.Repeat("s", MaxFactLength+1) },
		"chain":    func(r *Request) { r.Chain = make([]string, MaxChainDepth+1) },
		"scopes":   func(r *Request) { r.Scopes = make([]string, MaxFactEntries+1) },
		"groups":   func(r *Request) { r.Groups = []string{strings.Repeat("g", MaxFactLength+1)} },
		"audience": func(r *Request) { r.Audience = make([]string, MaxFactEntries+1) },
		"peer":     func(r *Request) { r.Peer = strings.Repeat("p", MaxFactLength+1) },
		"method":   func(r *Request) { r.RPCMethod = strings.Repeat("m", MaxFactLength+1) },
	} {
		r := sample()
		require.True(t, withinFactBounds(r), name)
		past(r)
		assert.False(t, withinFactBounds(r), name)
	}
}

// The static cost bounds what cel-go's runtime tracker counts, on a request with every fact at
// its bound: the size hints reach the estimator under the names the checker gives the variables,
// and a bounded rule would never have been stopped by the limit it runs without.
func TestTheStaticCostBoundsTheRuntimeCost(t *testing.T) {
	long := func(prefix string) string { return prefix + strings.Repeat("a", MaxFactLength-len(prefix)) }
	list := func(n int, prefix string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = long(fmt.Sprintf("%s%d-", prefix, i))
		}
		return out
	}
	r := &Request{
		Subject: long(""), Caller: long("spiffe://cluster.local/"), Peer: long("spiffe://"), Method: long("G"), RPCMethod: long("tasks/"),
		Path:  strings.Repeat("/abcdefgh", MaxPathLength/9),
		Chain: list(MaxChainDepth, "spiffe://cluster.local/"), Scopes: list(MaxFactEntries, "s"),
		Audience: list(MaxFactEntries, "aud"), Groups: list(MaxFactEntries, "/g"),
	}
	require.True(t, withinFactBounds(r))
	env, err := Env()
	require.NoError(t, err)
	exprs := []string{
		`subject.lowerAscii() == subject.upperAscii().lowerAscii()`,
		`chain.all(a, a.startsWith("spiffe://cluster.local/"))`,
		`chain.exists(a, a.contains(caller))`,
		`"x" in scopes || "y" in groups || "z" in audience`,
		`sets.intersects(groups, scopes) || sets.contains(audience, chain)`,
		`groups.exists(g, g.contains("zz"))`,
		`request.path.matches("^(/[a-z]+)+/tasks$") || request.path.endsWith(peer)`,
		`request.rpcMethod + request.method + subject == caller`,
		`scopes.map(s, s.split("-")).exists(l, l.size() > 3)`,
		`audience.filter(a, a.endsWith("z")).size() > 0`,
	}
	for _, c := range tenRules() {
		exprs = append(exprs, c.When)
	}
	for _, when := range exprs {
		t.Run(when, func(t *testing.T) {
			ast, iss := env.Compile(when)
			require.NoError(t, iss.Err())
			est, err := staticCost(env, ast)
			require.NoError(t, err)
			prg, err := env.Program(ast, cel.EvalOptions(cel.OptTrackCost))
			require.NoError(t, err)
			_, details, err := prg.Eval(&activation{r: r})
			require.NoError(t, err)
			actual := details.ActualCost()
			require.NotNil(t, actual)
			t.Logf("runtime cost %d, estimated %d..%d", *actual, est.Min, est.Max)
			assert.LessOrEqual(t, *actual, est.Max)
		})
	}
}

// A decision on the ten rules allocates a tenth of what it did with the runtime cost
// tracker (79 allocations; 9 since).
func TestADecisionAllocatesLittle(t *testing.T) {
	p, err := Compile(tenRules(), "")
	require.NoError(t, err)
	r, ctx := sample(), context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if d, _ := p.Authorize(ctx, r); !d.Allowed {
			t.Fatal(d.Reason)
		}
	})
	assert.LessOrEqual(t, allocs, 20.0)
}

// A token whose claim is past the bounds of a request's facts is refused, naming the claim.
func TestFromClaimsRefusesATokenPastTheFactBounds(t *testing.T) {
	tooLong := strings.Repeat("x", MaxFactLength+1)
	tooMany := make([]any, MaxFactEntries+1)
	for i := range tooMany {
		tooMany[i] = "g"
	}
	for name, tc := range map[string]struct {
		raw    map[string]any
		scopes []string
		claim  string
		reason string
	}{
		"sub":          {map[string]any{"sub": tooLong}, nil, "sub", "1025 bytes, more than 1024"},
		"aud entries":  {map[string]any{"sub": "u", "aud": tooMany}, nil, "aud", "513 entries, more than 512"},
		"aud string":   {map[string]any{"sub": "u", "aud": tooLong}, nil, "aud", "entry 0 is 1025 bytes"},
		"groups":       {map[string]any{"sub": "u", "groups": tooMany}, nil, "groups", "513 entries, more than 512"},
		"group entry":  {map[string]any{"sub": "u", "groups": []any{"/a", tooLong}}, nil, "groups", "entry 1 is 1025 bytes"},
		"scope":        {map[string]any{"sub": "u", "scope": "a"}, make([]string, MaxFactEntries+1), "scope", "513 entries"},
		"scp":          {map[string]any{"sub": "u", "scp": []any{"a"}}, []string{tooLong}, "scp", "entry 0 is 1025 bytes"},
		"act.sub":      {map[string]any{"sub": "u", "act": map[string]any{"sub": "a", "act": map[string]any{"sub": tooLong}}}, nil, "act.sub", "1025 bytes"},
		"client_id":    {map[string]any{"sub": "u", "client_id": tooLong}, nil, "client_id", "1025 bytes"},
		"azp":          {map[string]any{"sub": "u", "azp": tooLong}, nil, "azp", "1025 bytes"},
		"at the bound": {map[string]any{"sub": tooLong[1:], "groups": tooMany[1:]}, nil, "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := FromClaims(tc.raw, tc.scopes, 0)
			if tc.claim == "" {
				require.NoError(t, err)
				assert.True(t, withinFactBounds(r))
				return
			}
			var ce *ClaimError
			require.True(t, errors.As(err, &ce), "got %v", err)
			assert.Equal(t, tc.claim, ce.Claim)
			assert.Contains(t, err.Error(), fmt.Sprintf("claim %q: %s", tc.claim, tc.reason))
		})
	}
}
