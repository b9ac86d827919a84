package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// kindAgentCard is an A2A card for the suite's stand-in agent (its AGENT_CARD variable).
func kindAgentCard(name, url string) corev1.EnvVar {
	card, _ := json.Marshal(map[string]any{
		"protocolVersion": "0.3.0", "name": name, "description": "the e2e suite's stand-in agent",
		"url": url, "version": "1.0.0", "capabilities": map[string]any{},
		"defaultInputModes": []string{"text/plain"}, "defaultOutputModes": []string{"application/json"},
		"skills": []map[string]any{{"id": "echo", "name": "Echo", "description": "answers what it got", "tags": []string{"test"}}},
	})
	return corev1.EnvVar{Name: "AGENT_CARD", Value: string(card)}
}

// createKindAgentCard creates AgentCard ns/name for Deployment name, unsigned (the card's fetch
// is what the caller needs), synced every 10 s.
func createKindAgentCard(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	ac := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"targetRef":        map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
		"requireSignature": false,
		"syncPeriod":       "10s",
	}}}
	ac.SetGroupVersionKind(agentcardE2EGVK)
	ac.SetNamespace(ns)
	ac.SetName(name)
	framework.Create(t, c, ac)
}

// kindGraph is what GET /v1/graph answers (agentcard/internal/discovery.Graph, the fields read here).
type kindGraph struct {
	Edges []struct {
		To, Caller, CallerAgent string
		Via                     []string
		Allowed, Denied         float64
	}
	Pods        int
	Unavailable []string
}

// assertKindDiscoveryGraph: agentcard's discovery API (in kagenti-system, through a port-forward
// to its pod, over TLS verified with the CA it publishes) answers GET /v1/graph for the callee's
// AgentCard with the calls callerID made, read from the callee pod's authbridge by agentcard over
// the pod network; a token without get on agentcards/graph is refused.
func assertKindDiscoveryGraph(t *testing.T, c client.Client, ns, callee, callerID string) {
	t.Helper()
	framework.RequirePillar(t, c, "agentcard")
	createKindAgentCard(t, c, ns, callee)
	framework.Eventually(t, 2*time.Minute, "AgentCard "+callee+": its pod fetched", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(agentcardE2EGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: callee}, u); err != nil {
			return false, "", err
		}
		cards, _, _ := unstructured.NestedSlice(u.Object, "status", "cards")
		for _, e := range cards {
			if m, _ := e.(map[string]any); m["podIP"] != nil && m["podIP"] != "" {
				return true, "", nil
			}
		}
		return false, fmt.Sprint(u.Object["status"]), nil
	})

	framework.Create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "graph-reader"}})
	framework.Create(t, c, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "graph"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kagenti.io"}, Resources: []string{"agentcards/graph"}, Verbs: []string{"get"}}}})
	framework.Create(t, c, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "graph"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "graph"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "graph-reader", Namespace: ns}}})
	cs := kubernetes.NewForConfigOrDie(framework.Config(t))
	tokenOf := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kagenti-system", Name: "kagenti-agentcard"}, &d); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace("kagenti-system"), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil || len(pods.Items) == 0 {
		t.Fatalf("the agentcard pods: %v (%d)", err, len(pods.Items))
	}
	base := "https://" + framework.PortForward(t, "kagenti-system", pods.Items[0].Name, 8090)
	https := discoveryClient(t, c, "kagenti-agentcard-discovery.kagenti-system.svc")
	get := func(token string) (int, string, error) {
		return discoveryGet(https, base+"/v1/graph?namespace="+ns+"&name="+callee, token)
	}

	reader := tokenOf("graph-reader")
	var g kindGraph
	framework.Eventually(t, time.Minute, "GET /v1/graph shows the calls from "+callerID, func(context.Context) (bool, string, error) {
		code, body, err := get(reader)
		if err != nil || code != http.StatusOK {
			return false, framework.Sprintf("%d %s %v", code, body, err), nil
		}
		g = kindGraph{}
		if err := json.Unmarshal([]byte(body), &g); err != nil {
			return false, "", err
		}
		for _, e := range g.Edges {
			if e.To == ns+"/"+callee && e.Caller == callerID && len(e.Via) == 0 && e.Allowed >= 1 {
				return g.Pods == 1, body, nil
			}
		}
		return false, body, nil
	})
	t.Logf("GET /v1/graph: %d pod(s) read, edges %+v", g.Pods, g.Edges)
	if code, body, _ := get(tokenOf("default")); code != http.StatusForbidden {
		t.Errorf("GET /v1/graph without get on agentcards/graph: %d %s, want 403", code, body)
	}
}
