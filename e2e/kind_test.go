package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// What only a real cluster shows: packets dropped by the NetworkPolicy netpol writes.

func requireKind(t *testing.T) {
	t.Helper()
	if framework.ClusterKind() != "kind" {
		t.Skipf("needs real pods and a NetworkPolicy enforcer (make e2e-kind); this is %s", framework.ClusterKind())
	}
}

// serverPort is where the agent of TestKindNetworkPolicyEnforced answers TCP: CoreDNS, whose image
// every node holds, serving its default zone on an unprivileged port.
const serverPort = 8053

// TestKindNetworkPolicyEnforced: the agent of an unverified AgentCard cannot be reached, on the
// network, from a pod labelled verified; once the card is verified it can; unverified again, it
// cannot. A pod without the verified label cannot reach it either way. Reachability is what each
// client pod's readiness probe sees (a TCP connect from the pod's own network namespace, every
// second); the time each flip took is logged.
func TestKindNetworkPolicyEnforced(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "netpol")
	pauseAgentCard(t, c)
	ns := framework.Namespace(t, c, "np-enforced", nil)

	labels := map[string]string{"app": "np-server"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "np-server", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "server", Image: framework.ServerImage(), Args: []string{"-dns.port", fmt.Sprint(serverPort)},
					Ports: []corev1.ContainerPort{{ContainerPort: serverPort, Protocol: corev1.ProtocolTCP}},
				}}},
			},
		},
	})
	serverIP := runningPodIP(t, c, ns, labels)

	// The verified client carries kagenti.io/signature-verified=true, which only agentcard may set
	// (netpol's admission policy): the test creates it as agentcard's service account.
	verified := clientPod(ns, "verified-client", serverIP, map[string]string{"kagenti.io/signature-verified": "true"})
	framework.Create(t, asAgentCard(t), verified)
	plain := clientPod(ns, "plain-client", serverIP, nil)
	framework.Create(t, c, plain)
	// No policy yet: both reach the server.
	waitReady(t, c, verified, true)
	waitReady(t, c, plain, true)

	card := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "np-server"}},
	}}
	card.SetGroupVersionKind(agentCardGVK)
	card.SetNamespace(ns)
	card.SetName("np-server-card")
	start := time.Now()
	framework.Create(t, c, card)
	waitNetpol(t, c, ns, "np-server-agent-policy", "restrictive")
	waitReady(t, c, verified, false)
	t.Logf("card created → verified client cut off: %v", time.Since(start).Round(100*time.Millisecond))
	// The plain client is cut off too; wait for its probe to say so, or its readiness from before
	// the policy would pass for a leak below (seen under load).
	waitReady(t, c, plain, false)

	start = time.Now()
	setVerdict(t, c, card, true)
	waitNetpol(t, c, ns, "np-server-agent-policy", "permissive")
	waitReady(t, c, verified, true)
	t.Logf("verdict True → verified client reaches the agent: %v", time.Since(start).Round(100*time.Millisecond))
	assertStaysUnready(t, c, plain, 5*time.Second)

	start = time.Now()
	setVerdict(t, c, card, false)
	waitNetpol(t, c, ns, "np-server-agent-policy", "restrictive")
	waitReady(t, c, verified, false)
	t.Logf("verdict False → verified client cut off again: %v", time.Since(start).Round(100*time.Millisecond))
}

// pauseAgentCard scales agentcard's Deployment to zero for the test, where the whole platform is
// installed: the test plays agentcard (the verdict, the verified label), and the real one, which
// fetches no card from a DNS server, would write its own verdict and reset the label it did not
// grant. It is scaled back, and waited for, when the test ends.
func pauseAgentCard(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Namespace: framework.SystemNamespace, Name: "kagenti-agentcard"}
	var d appsv1.Deployment
	if err := c.Get(ctx, key, &d); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	scale := func(n int32) {
		if err := c.Get(ctx, key, &d); err != nil {
			t.Fatal(err)
		}
		d.Spec.Replicas = ptr.To(n)
		if err := c.Update(ctx, &d); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 3*time.Minute, framework.Sprintf("kagenti-agentcard at %d ready replicas", n), func(ctx context.Context) (bool, string, error) {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
				return false, "", err
			}
			ready := int32(0)
			for _, p := range pods.Items {
				if podReady(&p) && p.DeletionTimestamp == nil {
					ready++
				}
			}
			return ready == n && (n > 0 || len(pods.Items) == 0), framework.Sprintf("%d pods, %d ready", len(pods.Items), ready), nil
		})
	}
	scale(0)
	t.Cleanup(func() { scale(replicas) })
}

// asAgentCard is a client that the API server takes for agentcard's service account (authorized
// as a cluster administrator), for what only agentcard may do.
func asAgentCard(t *testing.T) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(framework.Config(t))
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + framework.SystemNamespace + ":kagenti-agentcard",
		Groups:   []string{"system:masters", "system:authenticated"},
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientPod sleeps; its readiness is whether a TCP connection to ip:serverPort opens within a second.
func clientPod(ns, name, ip string, labels map[string]string) *corev1.Pod {
	probe := fmt.Sprintf("timeout 1 bash -c '</dev/tcp/%s/%d'", ip, serverPort)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "client", Image: framework.ShellImage(), Command: []string{"sleep", "infinity"},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"bash", "-c", probe}}},
				PeriodSeconds:    1,
				TimeoutSeconds:   3,
				SuccessThreshold: 1,
				FailureThreshold: 1,
			},
		}}},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitReady(t *testing.T, c client.Client, pod *corev1.Pod, want bool) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, framework.Sprintf("%s reaches the server: %v", pod.Name, want), func(ctx context.Context) (bool, string, error) {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, "", err
		}
		if got.Status.Phase != corev1.PodRunning {
			return false, string(got.Status.Phase), nil
		}
		return podReady(&got) == want, framework.Sprintf("ready %v", podReady(&got)), nil
	})
}

// assertStaysUnready: the pod's probe keeps failing for d (it would turn Ready within a second of
// one connection getting through).
func assertStaysUnready(t *testing.T, c client.Client, pod *corev1.Pod, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var got corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &got); err != nil {
			t.Fatal(err)
		}
		if podReady(&got) {
			t.Fatalf("%s (no verified label) reached the agent of a verified card", pod.Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func runningPodIP(t *testing.T, c client.Client, ns string, labels map[string]string) string {
	t.Helper()
	var ip string
	framework.Eventually(t, 2*time.Minute, "server pod running", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				ip = p.Status.PodIP
				return true, "", nil
			}
		}
		return false, framework.Sprintf("%d pods, none running", len(pods.Items)), nil
	})
	return ip
}

// TestKindCheck: `kagenti check` passes on the platform installed as a user would (hack/kind.sh: the
// umbrella helm chart, every pillar, netpol on, the dev IdP as the injector's IdP): every CRD, every
// controller reconciling, every webhook's certificate (read from the Secret the rotator flags name:
// the controllers write it into an emptyDir) valid for its caBundle, the injector's webhook
// reachable by the API server, and the IdP Service with ready endpoints.
func TestKindCheck(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	for _, p := range []string{"injector", "tokenexchange", "agenttrace", "agentcard", "agentbuild", "netpol"} {
		framework.RequirePillar(t, c, p)
	}
	res := kagenti(t, "check")
	if res.code != 0 {
		t.Fatalf("kagenti check failed on kind (exit %d)", res.code)
	}
	if strings.Contains(res.stdout, "✗") {
		t.Errorf("kagenti check printed a failed line on kind:\n%s", res.stdout)
	}
	// The certificates are checked, not skipped: the CLI reads them from the rotator's Secrets.
	for _, want := range []string{"✓ webhook inject.kagenti.io certificate", "✓ webhook tokenexchange.kagenti.io certificate"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("kagenti check printed no %q line:\n%s", want, res.stdout)
		}
	}
	for _, want := range []string{"kagenti-injector", "kagenti-tokenexchange", "kagenti-dev-idp"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("kagenti check says nothing of %s:\n%s", want, res.stdout)
		}
	}
}
