package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

func token(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}))
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

func call(t *testing.T, path, tok string, out any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, discURL+path, nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

func TestDiscoveryAPI(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "disc"}
	serveCard(t, "127.42.6.1", testcards.Weather("3.0.0"))
	makePod(t, ns, "disc-1", "127.42.6.1", "", labels)
	for i := 0; i < 3; i++ {
		l := map[string]string{"app": fmt.Sprintf("none-%d", i)}
		require.NoError(t, k8s.Create(ctx, selectorCard(ns, fmt.Sprintf("empty-%d", i), l)))
	}
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "disc", labels)))
	eventually(t, 20*time.Second, func() string {
		if c := getCard(t, ns, "disc"); cond(c, "Ready") != "True/CardAvailable" {
			return cond(c, "Ready")
		}
		return ""
	})

	reader := token(t, ns, "reader")
	stranger := token(t, ns, "stranger")
	require.NoError(t, k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cards"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kagenti.io"}, Resources: []string{"agentcards"}, Verbs: []string{"get", "list"}}}}))
	require.NoError(t, k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cards"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cards"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns}}}))

	assert.Equal(t, http.StatusUnauthorized, call(t, "/v1/agents?namespace="+ns, "", nil), "no token")
	assert.Equal(t, http.StatusUnauthorized, call(t, "/v1/agents?namespace="+ns, "garbage", nil), "invalid token")
	assert.Equal(t, http.StatusForbidden, call(t, "/v1/agents?namespace="+ns, stranger, nil), "no RBAC")
	assert.Equal(t, http.StatusForbidden, call(t, "/v1/agents", reader, nil), "cluster-wide list needs cluster-wide RBAC")

	eventually(t, 10*time.Second, func() string { // RBAC caches settle
		if code := call(t, "/v1/agents?namespace="+ns, reader, nil); code != http.StatusOK {
			return fmt.Sprint(code)
		}
		return ""
	})
	var page discovery.AgentList
	require.Equal(t, http.StatusOK, call(t, "/v1/agents?namespace="+ns+"&skill=get_forecast", reader, &page))
	require.Len(t, page.Items, 1)
	a := page.Items[0]
	assert.Equal(t, "disc", a.Name)
	assert.Equal(t, "Weather Intelligence Agent", a.AgentName)
	assert.Equal(t, "3.0.0", a.Version)
	assert.True(t, a.Ready)
	assert.False(t, a.Verified)
	assert.Contains(t, a.Tags, "forecast")
	assert.Empty(t, a.Card, "lists carry summaries, not cards")

	require.Equal(t, http.StatusOK, call(t, "/v1/agents?namespace="+ns+"&tag=forecast&verified=false", reader, &page))
	assert.Len(t, page.Items, 1)
	require.Equal(t, http.StatusOK, call(t, "/v1/agents?namespace="+ns+"&verified=true", reader, &page))
	assert.Len(t, page.Items, 0)

	// Pagination: 4 cards, 3 pages of at most 2... of size 2.
	var all []string
	next := ""
	for i := 0; i < 5; i++ {
		page = discovery.AgentList{}
		require.Equal(t, http.StatusOK, call(t, "/v1/agents?namespace="+ns+"&limit=2&continue="+next, reader, &page))
		for _, it := range page.Items {
			all = append(all, it.Name)
		}
		if next = page.Continue; next == "" {
			break
		}
	}
	assert.Equal(t, []string{"disc", "empty-0", "empty-1", "empty-2"}, all)

	var one discovery.Agent
	require.Equal(t, http.StatusOK, call(t, "/v1/agents/"+ns+"/disc", reader, &one))
	assert.Contains(t, string(one.Card), `"get_forecast"`)
	assert.Equal(t, http.StatusNotFound, call(t, "/v1/agents/"+ns+"/missing", reader, nil))
	assert.Equal(t, http.StatusForbidden, call(t, "/v1/agents/"+ns+"/disc", stranger, nil))
}
