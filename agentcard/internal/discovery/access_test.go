package discovery_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

// tokenexchangeConfig is config.yaml as tokenexchange's renderer writes it for a policy: deny
// callers */sa/bob, allow */sa/alice, allow anyone's tasks/get (its test keeps it up to date).
func tokenexchangeConfig(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../pkg/configmap/authz/testdata/tokenexchange-policy.config.yaml"))
	require.NoError(t, err)
	return string(b)
}

// accessNamespace adds to newNamespace's ServiceAccounts alice, bob and carol, each allowed to
// list and get its AgentCards, and the AgentCards guarded (its workload has the policy), open (no
// TokenExchange) and weather (selector mode, from newNamespace).
func accessNamespace(t *testing.T) (string, *corev1.ConfigMap) {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	create := func(o client.Object) { require.NoError(t, k8s.Create(ctx, o)) }
	var subjects []rbacv1.Subject
	for _, sa := range []string{"alice", "bob", "carol"} {
		create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}})
		subjects = append(subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns})
	}
	create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "callers"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cards"}, Subjects: subjects})
	for _, w := range []string{"guarded", "open"} {
		create(&v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w},
			Spec: v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: w}}})
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: configmap.TokenExchangeName("guarded"),
			Labels: map[string]string{contract.PartOfLabel: contract.PartOf, contract.ComponentLabel: contract.ComponentTokenExchange}},
		Data: map[string]string{contract.TokenExchangeConfigFile: tokenexchangeConfig(t)},
	}
	create(cm)
	return ns, cm
}

// accessOf lists the agents of ns as sa with query and returns each one's access by name.
func accessOf(t *testing.T, a *api, ns, sa, query string) map[string]*authz.Access {
	t.Helper()
	resp, body := a.get(t, "/v1/agents?namespace="+ns+"&"+query, token(t, ns, sa))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var list discovery.AgentList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	out := map[string]*authz.Access{}
	for _, item := range list.Items {
		out[item.Name] = item.Access
	}
	return out
}

func TestWhichAgentsMayICall(t *testing.T) {
	ns, cm := accessNamespace(t)
	a := startAPIAs(t, discovery.Options{TrustDomain: "cluster.local", Policies: true}, grantShippedRBAC(t, ns, "policyreader_role.yaml"))
	a.waitServing(t)
	// The policies' watch syncs after the API serves: until then the answers are unknown.
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return accessOf(t, a, ns, "alice", "access=true")["open"].Result != authz.AccessUnknown, nil
	}))

	t.Run("each caller gets its own answer from the workload's policy", func(t *testing.T) {
		alice := accessOf(t, a, ns, "alice", "access=true")
		assert.Equal(t, &authz.Access{Result: authz.AccessAllow, Rules: []string{"only-alice"}, Reason: `allowed by rule "only-alice"`}, alice["guarded"])
		assert.Equal(t, authz.AccessAllow, alice["open"].Result, "no TokenExchange: no policy")
		assert.Equal(t, authz.AccessUnknown, alice["weather"].Result, "selector mode: no workload")

		bob := accessOf(t, a, ns, "bob", "access=true")
		assert.Equal(t, &authz.Access{Result: authz.AccessDeny, Rules: []string{"no-bob"}, Reason: `denied by rule "no-bob"`}, bob["guarded"])

		carol := accessOf(t, a, ns, "carol", "access=true")
		assert.Equal(t, authz.AccessConditional, carol["guarded"].Result)
		assert.Equal(t, []string{"reads", "default"}, carol["guarded"].Rules)
		assert.Equal(t, []string{"request.rpcMethod"}, carol["guarded"].Needs)
	})

	t.Run("callable filters to allow and conditional", func(t *testing.T) {
		bob := accessOf(t, a, ns, "bob", "callable=true")
		assert.Equal(t, []string{"open"}, keys(bob), "guarded denies bob; weather is unknown")
		carol := accessOf(t, a, ns, "carol", "callable=true")
		assert.ElementsMatch(t, []string{"guarded", "open"}, keys(carol))
	})

	t.Run("no access unless asked", func(t *testing.T) {
		for name, acc := range accessOf(t, a, ns, "alice", "") {
			assert.Nil(t, acc, name)
		}
	})

	t.Run("one agent", func(t *testing.T) {
		resp, body := a.get(t, "/v1/agents/"+ns+"/guarded?access=true", token(t, ns, "bob"))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var one discovery.Agent
		require.NoError(t, json.Unmarshal([]byte(body), &one))
		require.NotNil(t, one.Access)
		assert.Equal(t, authz.AccessDeny, one.Access.Result)
	})

	t.Run("unauthenticated is refused as before", func(t *testing.T) {
		resp, body := a.get(t, "/v1/agents?namespace="+ns+"&callable=true", "")
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	})

	t.Run("a bad flag names it", func(t *testing.T) {
		resp, body := a.get(t, "/v1/agents?namespace="+ns+"&callable=yes-please", token(t, ns, "bob"))
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Contains(t, body, "callable must be true or false")
	})

	t.Run("the answer follows the ConfigMap", func(t *testing.T) {
		cm.Data[contract.TokenExchangeConfigFile] = "inbound:\n  authorization:\n    rules:\n    - {name: only-bob, effect: Allow, when: 'caller.endsWith(\"/sa/bob\")'}\n"
		require.NoError(t, k8s.Update(context.Background(), cm))
		require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return accessOf(t, a, ns, "bob", "access=true")["guarded"].Result == authz.AccessAllow, nil
		}))
		assert.Equal(t, authz.AccessDeny, accessOf(t, a, ns, "alice", "access=true")["guarded"].Result)

		require.NoError(t, k8s.Delete(context.Background(), cm))
		require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return accessOf(t, a, ns, "alice", "access=true")["guarded"].Result == authz.AccessAllow, nil
		}), "the TokenExchange gone: no policy")
	})
}

func keys(m map[string]*authz.Access) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestWhichAgentsMayICallIsOptIn: without --discovery-policies agentcard reads no policy (and its
// default rights read no ConfigMap but the trust bundle): asking is a 400 that says how to turn it
// on, and the list without the question is served as before.
func TestWhichAgentsMayICallIsOptIn(t *testing.T) {
	ns, _ := accessNamespace(t)
	a := startAPIAs(t, discovery.Options{TrustDomain: "cluster.local"}, grantShippedRBAC(t, ns))
	a.waitServing(t)
	for _, q := range []string{"callable=true", "access=true"} {
		resp, body := a.get(t, "/v1/agents?namespace="+ns+"&"+q, token(t, ns, "alice"))
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
		assert.Contains(t, body, "--discovery-policies", q)
	}
	resp, body := a.get(t, "/v1/agents/"+ns+"/guarded?access=true", token(t, ns, "alice"))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	resp, body = a.get(t, "/v1/agents?namespace="+ns, token(t, ns, "alice"))
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}
