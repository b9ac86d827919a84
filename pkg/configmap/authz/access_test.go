package authz

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	alice = "spiffe://cluster.local/ns/agents/sa/alice-agent"
	bob   = "spiffe://cluster.local/ns/agents/sa/bob-agent"
)

func mayCall(t *testing.T, rules []Rule, def Effect, c Caller) Access {
	t.Helper()
	p, err := Compile(rules, def)
	require.NoError(t, err)
	return p.MayCall(c)
}

func TestMayCallAnswersEveryRuleForm(t *testing.T) {
	onlyAlice := Rule{Name: "only-alice", Effect: Allow, When: fmt.Sprintf("caller == %q", alice)}
	noBob := Rule{Name: "no-bob", Effect: Deny, When: fmt.Sprintf("caller == %q", bob)}
	readOnly := Rule{Name: "read-only", Effect: Allow, When: `request.rpcMethod == "tasks/get"`}
	aliceReads := Rule{Name: "alice-reads", Effect: Allow, When: fmt.Sprintf(`caller == %q && request.rpcMethod == "tasks/get"`, alice)}
	noUserBob := Rule{Name: "no-user-bob", Effect: Deny, When: `subject == "bob"`}
	finance := Rule{Name: "finance", Effect: Allow, When: `sets.intersects(groups, ["/finance"]) || "agent:invoke" in scopes`}
	tenant := Rule{Name: "tenant", Effect: Allow, When: `claims.tenant == "acme"`}
	secondHop := Rule{Name: "second-hop", Effect: Allow, When: fmt.Sprintf("chain[1] == %q", alice)}
	overMTLS := Rule{Name: "over-mtls", Effect: Allow, When: "peer == caller"}
	someone := "spiffe://cluster.local/ns/agents/sa/someone"

	for _, tc := range []struct {
		name   string
		rules  []Rule
		def    Effect
		caller Caller
		result AccessResult
		rules2 []string
		needs  []string
	}{
		{name: "no rules allow", caller: Caller{ID: alice}, result: AccessAllow, rules2: []string{DefaultRule}},
		{name: "an allow rule on the caller allows it", rules: []Rule{onlyAlice}, caller: Caller{ID: alice}, result: AccessAllow, rules2: []string{"only-alice"}},
		{name: "and the default denies the others", rules: []Rule{onlyAlice}, caller: Caller{ID: bob}, result: AccessDeny, rules2: []string{DefaultRule}},
		{name: "a deny rule on the caller denies it", rules: []Rule{noBob}, caller: Caller{ID: bob}, result: AccessDeny, rules2: []string{"no-bob"}},
		{name: "deny overrides allow", rules: []Rule{{Name: "all", Effect: Allow, When: "true"}, noBob}, caller: Caller{ID: bob}, result: AccessDeny, rules2: []string{"no-bob"}},
		{name: "a rule on the JSON-RPC method is conditional", rules: []Rule{readOnly}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"read-only", DefaultRule}, needs: []string{VarRPCMethod}},
		{name: "the caller's part decides first", rules: []Rule{aliceReads}, caller: Caller{ID: bob}, result: AccessDeny, rules2: []string{DefaultRule}},
		{name: "then the request's", rules: []Rule{aliceReads}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"alice-reads", DefaultRule}, needs: []string{VarRPCMethod}},
		{name: "a deny rule on the user is conditional", rules: []Rule{noUserBob}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"no-user-bob", DefaultRule}, needs: []string{VarSubject}},
		{name: "groups and scopes", rules: []Rule{finance}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"finance", DefaultRule}, needs: []string{VarGroups, VarScopes}},
		{name: "claims", rules: []Rule{tenant}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"tenant", DefaultRule}, needs: []string{VarClaims}},
		{name: "a rule failing on every direct call denies", rules: []Rule{secondHop}, def: Allow, caller: Caller{ID: alice}, result: AccessDeny, rules2: []string{"second-hop"}},
		{name: "peer unknown", rules: []Rule{overMTLS}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"over-mtls", DefaultRule}, needs: []string{VarPeer}},
		{name: "peer known", rules: []Rule{overMTLS}, caller: Caller{ID: alice, Peer: new(alice)}, result: AccessAllow, rules2: []string{"over-mtls"}},
		{name: "a user rule before a deny on the caller", rules: []Rule{noUserBob, noBob}, caller: Caller{ID: bob}, result: AccessDeny, rules2: []string{"no-user-bob", "no-bob"}},
		{name: "an unknown allow rule before a matching one may fail", rules: []Rule{tenant, onlyAlice}, caller: Caller{ID: alice}, result: AccessConditional, rules2: []string{"tenant", "only-alice"}, needs: []string{VarClaims}},
		{name: "a deny rule on the user where the default denies anyway", rules: []Rule{noUserBob}, def: Deny, caller: Caller{ID: someone}, result: AccessDeny, rules2: []string{"no-user-bob", DefaultRule}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mayCall(t, tc.rules, tc.def, tc.caller)
			assert.Equal(t, tc.result, a.Result, a.Reason)
			assert.Equal(t, tc.rules2, a.Rules)
			assert.Equal(t, tc.needs, a.Needs)
			assert.NotEmpty(t, a.Reason)
		})
	}
}

func TestWorkloadPolicyFollowsTheDataPlanesSettings(t *testing.T) {
	denyBob := fmt.Sprintf(`{name: no-bob, effect: Deny, when: 'caller == "%s"'}`, bob)
	for _, tc := range []struct {
		name, yaml string
		caller     string
		result     AccessResult
		dryRun     bool
		rules      []string
		needs      []string
		reason     string
	}{
		{name: "no authorization section", yaml: "inbound: {enabled: true}\n", caller: bob, result: AccessAllow, rules: []string{DefaultRule}},
		{name: "a policy", yaml: "inbound: {authorization: {rules: [" + denyBob + "]}}\n", caller: bob, result: AccessDeny, rules: []string{"no-bob"}},
		{name: "inbound disabled", yaml: "inbound: {enabled: false, authorization: {rules: [" + denyBob + "]}}\n", caller: bob, result: AccessAllow, reason: "inbound.enabled false"},
		{name: "validation disabled", yaml: "inbound: {validation: {enabled: false}, authorization: {rules: [" + denyBob + "]}}\n", caller: bob, result: AccessAllow, reason: "inbound.validation.enabled false"},
		{name: "dry run", yaml: "inbound: {authorization: {dryRun: true, rules: [" + denyBob + "]}}\n", caller: bob, result: AccessAllow, dryRun: true, rules: []string{"no-bob"}, reason: "would answer deny"},
		{name: "external after the rules allow", yaml: "inbound: {authorization: {external: {address: 'localhost:9000'}}}\n", caller: bob, result: AccessConditional, rules: []string{DefaultRule, ExternalRule}, reason: "external authorizer"},
		{name: "external after the rules deny", yaml: "inbound: {authorization: {external: {address: 'localhost:9000'}, rules: [" + denyBob + "]}}\n", caller: bob, result: AccessDeny, rules: []string{"no-bob"}},
		{name: "required scopes", yaml: "inbound: {validation: {requiredScopes: [agent:invoke]}}\n", caller: bob, result: AccessConditional, rules: []string{DefaultRule}, needs: []string{VarScopes}, reason: "requiredScopes"},
		{name: "strict mTLS makes peer the caller", yaml: "mtls: {mode: strict}\ninbound: {authorization: {rules: [{name: over-mtls, effect: Allow, when: 'peer == caller'}]}}\n", caller: bob, result: AccessAllow, rules: []string{"over-mtls"}},
		{name: "a policy that does not compile", yaml: "inbound: {authorization: {rules: [{name: bad, effect: Allow, when: 'caller =='}]}}\n", caller: bob, result: AccessUnknown, reason: `rules[0].when: rule "bad" does not compile`},
		{name: "config.yaml that does not parse", yaml: "inbound: [\n", caller: bob, result: AccessUnknown, reason: "config.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := ParseWorkloadPolicy([]byte(tc.yaml)).MayCall(tc.caller)
			assert.Equal(t, tc.result, a.Result, a.Reason)
			assert.Equal(t, tc.dryRun, a.DryRun)
			assert.Equal(t, tc.rules, a.Rules)
			assert.Equal(t, tc.needs, a.Needs)
			assert.Contains(t, a.Reason, tc.reason)
		})
	}
	var none *WorkloadPolicy
	assert.Equal(t, AccessAllow, none.MayCall(bob).Result, "no TokenExchange: no policy")
}

// TestMayCallAgreesWithAuthorize is the property the answer promises: whenever it says allow or
// deny for a caller, Authorize decides the same on every concrete direct call from that caller,
// whatever the user, token and request.
func TestMayCallAgreesWithAuthorize(t *testing.T) {
	policies := []struct {
		rules []Rule
		def   Effect
	}{
		{},
		{rules: []Rule{{Name: "only-alice", Effect: Allow, When: fmt.Sprintf("caller == %q", alice)}}},
		{rules: []Rule{{Name: "no-bob", Effect: Deny, When: fmt.Sprintf("caller == %q", bob)}}},
		{rules: []Rule{{Name: "alice-reads", Effect: Allow, When: fmt.Sprintf(`caller == %q && request.rpcMethod == "tasks/get"`, alice)}}},
		{rules: []Rule{{Name: "no-user-bob", Effect: Deny, When: `subject == "bob"`}, {Name: "team", Effect: Allow, When: `caller.startsWith("spiffe://cluster.local/ns/agents/")`}}},
		{rules: []Rule{{Name: "tenant", Effect: Allow, When: `claims.tenant == "acme"`}, {Name: "only-alice", Effect: Allow, When: fmt.Sprintf("caller == %q", alice)}}},
		{rules: []Rule{{Name: "second-hop", Effect: Allow, When: "chain[1] == caller"}}, def: Allow},
		{rules: []Rule{{Name: "mtls", Effect: Deny, When: `peer == ""`}, {Name: "reads", Effect: Allow, When: `request.method == "GET" || request.path.startsWith("/public/")`}}, def: Allow},
		{rules: []Rule{{Name: "scoped", Effect: Allow, When: `"agent:invoke" in scopes && sets.intersects(groups, ["/finance"])`}, {Name: "no-bob", Effect: Deny, When: fmt.Sprintf("caller == %q || subject == %q", bob, "bob")}}, def: Deny},
		{rules: []Rule{{Name: "audience", Effect: Allow, When: `audience.exists(a, a.endsWith("/callee"))`}, {Name: "always", Effect: Allow, When: fmt.Sprintf("caller == %q", bob)}}},
	}
	callers := []string{alice, bob, "spiffe://other.example/ns/x/sa/y"}
	rnd := rand.New(rand.NewPCG(29, 5))
	pick := func(xs ...string) string { return xs[rnd.IntN(len(xs))] }
	some := func(xs ...string) []string {
		var out []string
		for _, x := range xs {
			if rnd.IntN(2) == 0 {
				out = append(out, x)
			}
		}
		return out
	}
	decided := 0
	for i, pol := range policies {
		p, err := Compile(pol.rules, pol.def)
		require.NoError(t, err)
		for _, caller := range callers {
			for _, peerKnown := range []bool{false, true} {
				c := Caller{ID: caller}
				if peerKnown {
					c.Peer = new(caller)
				}
				a := p.MayCall(c)
				if a.Result != AccessAllow && a.Result != AccessDeny {
					continue
				}
				decided++
				for range 300 {
					r := &Request{
						Subject: pick("alice", "bob", ""), Caller: caller, Chain: []string{caller},
						Scopes: some("openid", "agent:invoke"), Audience: some("spiffe://cluster.local/ns/agents/sa/callee", "other"),
						Groups: some("/finance", "/staff"), Method: pick("GET", "POST"), Path: pick("/", "/public/a", "/admin"),
						RPCMethod: pick("", "tasks/get", "message/send"), Peer: pick("", caller),
					}
					if rnd.IntN(2) == 0 {
						r.Claims = map[string]any{"tenant": pick("acme", "other")}
					}
					if peerKnown {
						r.Peer = caller
					}
					d, err := p.Authorize(context.Background(), r)
					require.NoError(t, err)
					require.Equal(t, a.Result == AccessAllow, d.Allowed, "policy %d, caller %s: the question says %s (%s), Authorize decides %+v on %+v", i, caller, a.Result, a.Reason, d, r)
				}
			}
		}
	}
	assert.Greater(t, decided, 20, "the property is checked on definite answers")
}

func BenchmarkMayCall(b *testing.B) {
	w := ParseWorkloadPolicy([]byte(fmt.Sprintf(`inbound:
  authorization:
    rules:
    - {name: no-user-bob, effect: Deny, when: 'subject == "bob"'}
    - {name: alice-reads, effect: Allow, when: 'caller == "%s" && request.rpcMethod == "tasks/get"'}
    - {name: team, effect: Allow, when: 'caller.startsWith("spiffe://cluster.local/ns/team-a/")'}
`, alice)))
	w.MayCall(alice) // the partial programs are built on the first question
	b.ReportAllocs()
	for b.Loop() {
		w.MayCall(alice)
	}
}

// TestWorkloadPolicyReadsWhatTokenexchangeWrites parses config.yaml as tokenexchange's renderer
// writes it (the golden its test keeps up to date).
func TestWorkloadPolicyReadsWhatTokenexchangeWrites(t *testing.T) {
	b, err := os.ReadFile("testdata/tokenexchange-policy.config.yaml")
	require.NoError(t, err)
	w := ParseWorkloadPolicy(b)
	td := "spiffe://cluster.local/ns/agents/sa/"
	assert.Equal(t, AccessAllow, w.MayCall(td+"alice").Result)
	bobAccess := w.MayCall(td + "bob")
	assert.Equal(t, Access{Result: AccessDeny, Rules: []string{"no-bob"}, Reason: `denied by rule "no-bob"`}, bobAccess)
	carol := w.MayCall(td + "carol")
	assert.Equal(t, AccessConditional, carol.Result)
	assert.Equal(t, []string{"reads", DefaultRule}, carol.Rules)
	assert.Equal(t, []string{VarRPCMethod}, carol.Needs)
}
