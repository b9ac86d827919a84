package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

var agentcardE2EGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentCard"}

const e2eCardPort = 18281

// TestAgentCard: a Deployment labelled kagenti.io/type=agent gets an AgentCard automatically; its
// pod serves a card signed (with `kagenti-agentcard sign`) by an SVID for the pod's own service
// account from the local dev CA, which is the trust bundle; the card ends up Ready, verified and
// bound, and the pod (not the template) is labelled kagenti.io/signature-verified=true.
func TestAgentCard(t *testing.T) {
	if framework.ClusterKind() != "local" {
		t.Skipf("serving a card on a pod IP needs the local cluster's loopback pod IPs (this is %s)", framework.ClusterKind())
	}
	bin := filepath.Join(framework.Root(), "bin", "kagenti-agentcard")
	caDir := filepath.Join(framework.Root(), ".local", "agentcard")
	if _, err := os.Stat(filepath.Join(caDir, "ca.key")); err != nil {
		t.Skip("the agentcard pillar is not running on the local cluster (no dev CA in .local/agentcard)")
	}
	c := framework.Client(t)
	ctx := context.Background()
	ns := framework.Namespace(t, c, "agentcard", nil)
	sa := "card-agent"
	framework.Create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}})

	// Sign the card as the pod's identity.
	dir := t.TempDir()
	card := map[string]any{
		"protocolVersion": "0.3.0", "name": "E2E Agent", "description": "e2e", "version": "1.2.3",
		"url": "http://card-agent:8080", "capabilities": map[string]any{},
		"defaultInputModes": []string{"text/plain"}, "defaultOutputModes": []string{"text/plain"},
		"skills": []any{map[string]any{"id": "echo", "name": "Echo", "description": "echoes", "tags": []string{"e2e"}}},
	}
	raw, _ := json.Marshal(card)
	agentcardMust(t, os.WriteFile(filepath.Join(dir, "card.json"), raw, 0o600))
	agentcardRun(t, bin, "dev-svid", "--ca-cert", filepath.Join(caDir, "ca.crt"), "--ca-key", filepath.Join(caDir, "ca.key"),
		"--spiffe-id", "spiffe://cluster.local/ns/"+ns+"/sa/"+sa,
		"--out-cert", filepath.Join(dir, "svid.crt"), "--out-key", filepath.Join(dir, "svid.key"))
	signed := agentcardRun(t, bin, "sign", "--card", filepath.Join(dir, "card.json"), "--key", filepath.Join(dir, "svid.key"), "--cert", filepath.Join(dir, "svid.crt"))

	labels := map[string]string{"app": "card-agent"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "card-agent", Labels: map[string]string{"kagenti.io/type": "agent"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "agent", Image: framework.PauseImage(),
					Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: e2eCardPort}}}}}}},
	}
	framework.Create(t, c, dep)

	var pod corev1.Pod
	framework.Eventually(t, 60*time.Second, "a running card-agent pod with an IP", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
				pod = p
				return true, "", nil
			}
		}
		return false, framework.Sprintf("%d pods, none running with an IP", len(pods.Items)), nil
	})
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !ip.IsLoopback() {
		t.Skipf("pod IP %s is not loopback", pod.Status.PodIP)
	}
	framework.ServeOnPodIP(t, pod.Status.PodIP, e2eCardPort, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(signed)
	}))

	key := client.ObjectKey{Namespace: ns, Name: "card-agent-deployment-card"}
	framework.Eventually(t, 90*time.Second, "auto-created AgentCard Ready and verified", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(agentcardE2EGVK)
		if err := c.Get(ctx, key, u); err != nil {
			return false, "AgentCard not created yet: " + err.Error(), nil
		}
		verified, _, _ := unstructured.NestedBool(u.Object, "status", "signature", "verified")
		bound, _, _ := unstructured.NestedBool(u.Object, "status", "binding", "bound")
		name, _, _ := unstructured.NestedString(u.Object, "status", "card", "name")
		ready, verdict := agentcardCondition(u, "Ready"), agentcardCondition(u, "Verified")
		if !verified || !bound || name != "E2E Agent" || ready != "True" || verdict != "True" {
			return false, framework.Sprintf("verified=%v bound=%v card=%q Ready=%s Verified=%s", verified, bound, name, ready, verdict), nil
		}
		return true, "", nil
	})
	framework.Eventually(t, 30*time.Second, "pod labelled kagenti.io/signature-verified=true", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(&pod), &p); err != nil {
			return false, "", err
		}
		return p.Labels["kagenti.io/signature-verified"] == "true", "label=" + p.Labels["kagenti.io/signature-verified"], nil
	})
	var d appsv1.Deployment
	agentcardMust(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &d))
	if _, ok := d.Spec.Template.Labels["kagenti.io/signature-verified"]; ok {
		t.Fatal("the pod template must never carry kagenti.io/signature-verified")
	}
}

// TestAgentCardDiscoveryAPI: the local discovery API (127.0.0.1:18100) answers over TLS only; a
// client verifies it with the CA the controller published in the ConfigMap
// kagenti-system/kagenti-agentcard-discovery-ca and authenticates with a service-account token
// minted with the TokenRequest API; RBAC on agentcards decides what it may list.
func TestAgentCardDiscoveryAPI(t *testing.T) {
	if framework.ClusterKind() != "local" {
		t.Skipf("the discovery API is reached on 127.0.0.1:18100 on the local cluster only (this is %s)", framework.ClusterKind())
	}
	c := framework.Client(t)
	framework.RequirePillar(t, c, "agentcard")
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(framework.Config(t))
	const base = "https://127.0.0.1:18100"

	https := discoveryClient(t, c, "")

	ns := framework.Namespace(t, c, "discovery", nil)
	framework.Create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"}})
	framework.Create(t, c, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cards"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kagenti.io"}, Resources: []string{"agentcards"}, Verbs: []string{"get", "list"}}}})
	framework.Create(t, c, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cards"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cards"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns}}})
	card := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "nothing"}}}}}
	card.SetGroupVersionKind(agentcardE2EGVK)
	card.SetNamespace(ns)
	card.SetName("listed")
	framework.Create(t, c, card)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "reader", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	agentcardMust(t, err)

	var page struct {
		Items []struct{ Namespace, Name string }
	}
	framework.Eventually(t, 30*time.Second, "the reader lists the namespace's AgentCards over verified TLS", func(context.Context) (bool, string, error) {
		code, body, err := discoveryGet(https, base+"/v1/agents?namespace="+ns, tr.Status.Token)
		if err != nil || code != http.StatusOK {
			return false, framework.Sprintf("%d %s %v", code, body, err), nil
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			return false, "", err
		}
		return len(page.Items) == 1 && page.Items[0].Name == "listed", body, nil
	})
	if code, body, _ := discoveryGet(https, base+"/v1/agents?namespace="+ns, ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s, want 401", code, body)
	}
	if code, _, _ := discoveryGet(&http.Client{Timeout: 10 * time.Second}, "http://127.0.0.1:18100/v1/agents?namespace="+ns, tr.Status.Token); code != http.StatusBadRequest {
		t.Errorf("plain HTTP: %d, want 400 (the API serves TLS only)", code)
	}
}

// discoveryClient trusts the discovery API's CA, which agentcard publishes in the ConfigMap
// kagenti-system/kagenti-agentcard-discovery-ca, under serverName when set (a port-forward's
// address is not a name of the certificate).
func discoveryClient(t *testing.T, c client.Client, serverName string) *http.Client {
	t.Helper()
	var ca corev1.ConfigMap
	framework.Eventually(t, 30*time.Second, "the discovery API's CA published", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: "kagenti-system", Name: "kagenti-agentcard-discovery-ca"}, &ca)
		if err != nil {
			return false, err.Error(), nil
		}
		return ca.Data["ca.crt"] != "", "no ca.crt", nil
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca.Data["ca.crt"])) {
		t.Fatalf("ConfigMap kagenti-agentcard-discovery-ca: ca.crt holds no certificate")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
}

// discoveryGet sends GET url with the bearer token (when not empty) and returns the status and body.
func discoveryGet(cl *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestAgentCardResetsForgedLabel: a pod carrying kagenti.io/signature-verified=true that no
// AgentCard verified (here: none selects it) gets false from the running controller.
func TestAgentCardResetsForgedLabel(t *testing.T) {
	c := framework.Client(t)
	framework.RequirePillar(t, c, "agentcard")
	ns := framework.Namespace(t, c, "agentcard-forged", nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged", Labels: map[string]string{"app": "forged", "kagenti.io/signature-verified": "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: framework.PauseImage()}}},
	}
	if err := c.Create(context.Background(), pod); err != nil {
		// Where the manifests are installed (kind), netpol's admission policy refuses the label to
		// everyone but agentcard's service account.
		if !strings.Contains(err.Error(), "kagenti.io/signature-verified") {
			t.Fatalf("creating a pod with a forged label: %v", err)
		}
		t.Logf("the admission policy refuses the forged label: %v", err)
		return
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pod) })
	framework.Eventually(t, 60*time.Second, "forged kagenti.io/signature-verified=true reset to false", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, "", err
		}
		return p.Labels["kagenti.io/signature-verified"] == "false", "label=" + p.Labels["kagenti.io/signature-verified"], nil
	})
}

func agentcardCondition(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

func agentcardRun(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("%s %v: %v: %s", name, args, err, ee.Stderr)
		}
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out
}

func agentcardMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
