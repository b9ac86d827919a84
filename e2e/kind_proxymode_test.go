package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// outboundPort is where the authbridge's outbound proxy listens, the proxy that HTTP_PROXY names
// in proxy mode (the injector's identity.outboundPort).
const outboundPort = 15123

// TestKindProxyModeIdentityFlow: the identity flow in proxy mode on kind, in a namespace that
// enforces Pod Security restricted (kagenti.io/interception: proxy on the namespace). The real API
// server admits the injected pods (no proxy-init, no added capability: read from the live Pods),
// the kubelet runs them Ready, and the agents' own HTTP client sends the caller's call to
// callee.<ns>.svc:8080 through the authbridge as its explicit proxy (HTTP_PROXY), which exchanges
// the user's token for the callee's audience; the callee's Service targets the authbridge's
// kagenti-inbound port, whose inbound proxy validates it and refuses the user's own token. SPIFFE
// is off (the restricted level forbids the hostPath of the SPIRE socket): the caller registers
// with the dev IdP (RFC 7591) and authenticates its exchanges with the secret it registered.
// Beside it, a transparent-mode workload in a restricted namespace gets the injector's admission
// warning naming the level (its proxy-init needs NET_ADMIN).
//
// The agents listen on every interface: in proxy mode the injector leaves their probes as written,
// so the kubelet probes the agent's own port on the pod IP. Its first run had them on loopback only
// (what docs/identity.md suggests against requests that bypass the inbound proxy): the kubelet's
// probes were refused and the agents restarted forever.
func TestKindProxyModeIdentityFlow(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "tokenexchange")
	ns := framework.Namespace(t, c, "kind-proxymode", map[string]string{
		"kagenti.io/injection":               "enabled",
		"kagenti.io/interception":            "proxy",
		"pod-security.kubernetes.io/enforce": "restricted",
	})
	callerID := "spiffe://cluster.local/ns/" + ns + "/sa/caller"
	calleeID := "spiffe://cluster.local/ns/" + ns + "/sa/callee"
	issuer := "http://idp." + ns + ".svc:9080"
	calleeHost := "callee." + ns + ".svc"

	createKindIdP(t, c, ns, kindIdP{issuer: issuer, clients: []string{"user:user-secret:" + callerID}})
	warned, warnings := clientWithWarnings(t)
	createKindAgent(t, warned, ns, "caller", nil, proxyModeAgent)
	createKindAgent(t, warned, ns, "callee", nil, proxyModeAgent)
	validation := kindValidation(issuer)
	createKindTokenExchange(t, c, ns, "caller-auth", map[string]any{
		"targetRef":          map[string]any{"kind": "Deployment", "name": "caller"},
		"clientRegistration": kindOIDC(issuer),
		"inbound":            map[string]any{"validation": validation},
		"outbound": map[string]any{"tokenExchange": map[string]any{
			"tokenUrl": issuer + "/oauth/token", "destinationRules": exchangeRoute(calleeHost, calleeID)}},
	})
	createKindTokenExchange(t, c, ns, "callee-auth", validatingOnly(deploymentRef("callee"), map[string]any{"validation": validation}))
	caller := readyPodOf(t, c, ns, "caller")
	callee := readyPodOf(t, c, ns, "callee")

	t.Run("restricted admits the pods: no proxy-init, no added capability, no injector warning", func(t *testing.T) {
		for _, p := range []*corev1.Pod{caller, callee} {
			for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				if ctr.Name == "proxy-init" {
					t.Errorf("pod %s has proxy-init in proxy mode", p.Name)
				}
				if sc := ctr.SecurityContext; sc != nil && (sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 || ptr.Deref(sc.Privileged, false)) {
					t.Errorf("pod %s: container %s adds capabilities %v (privileged %v)", p.Name, ctr.Name, sc.Capabilities.Add, ptr.Deref(sc.Privileged, false))
				}
			}
			assertNoRestarts(t, p)
		}
		for _, w := range warnings.all() {
			if strings.Contains(w, "kagenti-injector") {
				t.Errorf("the injector warned about a proxy-mode workload in a restricted namespace: %s", w)
			}
		}
	})

	t.Run("the agents get HTTP_PROXY naming the outbound proxy", func(t *testing.T) {
		want := "http://127.0.0.1:" + strconv.Itoa(outboundPort)
		for _, p := range []*corev1.Pod{caller, callee} {
			if got := envValue(p.Spec.Containers[0], "HTTP_PROXY"); got != want {
				t.Errorf("pod %s: the agent's HTTP_PROXY is %q, want %q", p.Name, got, want)
			}
		}
	})

	var inbound int32
	t.Run("the callee's Service reaches the authbridge's kagenti-inbound port", func(t *testing.T) {
		var d appsv1.Deployment
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "callee"}, &d); err != nil {
			t.Fatal(err)
		}
		var st struct {
			Interception      string `json:"interception"`
			ServiceTargetPort string `json:"serviceTargetPort"`
		}
		if err := json.Unmarshal([]byte(d.Spec.Template.Annotations["kagenti.io/injection-status"]), &st); err != nil {
			t.Fatalf("injection status %q: %v", d.Spec.Template.Annotations["kagenti.io/injection-status"], err)
		}
		if st.Interception != "proxy" || st.ServiceTargetPort != proxyModeAgent.target.StrVal {
			t.Fatalf("injection status says interception %q, serviceTargetPort %q; want proxy, %s", st.Interception, st.ServiceTargetPort, proxyModeAgent.target.StrVal)
		}
		inbound = namedPort(t, callee, proxyModeAgent.target.StrVal)
		framework.Eventually(t, time.Minute, "EndpointSlice of Service callee on port "+strconv.Itoa(int(inbound)), func(ctx context.Context) (bool, string, error) {
			var slices discoveryv1.EndpointSliceList
			if err := c.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "callee"}); err != nil {
				return false, "", err
			}
			var ports []string
			for _, s := range slices.Items {
				for _, p := range s.Ports {
					ports = append(ports, fmt.Sprint(ptr.Deref(p.Port, 0)))
					if ptr.Deref(p.Port, 0) == inbound && len(s.Endpoints) > 0 {
						return true, "", nil
					}
				}
			}
			return false, "ports " + strings.Join(ports, ","), nil
		})
	})
	if inbound == 0 {
		t.FailNow()
	}

	user := clientCredentialsToken(t, "http://"+framework.PortForward(t, ns, podOf(t, c, ns, "idp"), 9080), "user", "user-secret")

	t.Run("caller → callee through the explicit proxy: exchanged for the callee's audience", func(t *testing.T) {
		callerInbound := "http://" + framework.PortForward(t, ns, caller.Name, int(namedPort(t, caller, proxyModeAgent.target.StrVal)))
		res := kindCall(t, callerInbound, calleeHost, user)
		got := decodeReport(t, res)
		if got.Pod != callee.Name {
			t.Fatalf("answered by %q, want the callee's agent %s", got.Pod, callee.Name)
		}
		exchanged := bearer(got.Headers)
		if exchanged == user {
			t.Fatal("the callee received the user's original token: no exchange")
		}
		if claims := jwtClaims(t, exchanged); fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{calleeID}) {
			t.Errorf("exchanged token audience %v, want [%s]", claims["aud"], calleeID)
		}
	})

	t.Run("the caller registered with the dev IdP (RFC 7591)", func(t *testing.T) {
		framework.Eventually(t, time.Minute, "caller-auth: idpRegistered", func(ctx context.Context) (bool, string, error) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(tokenExchangeGVK)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "caller-auth"}, u); err != nil {
				return false, "", err
			}
			registered, _, _ := unstructured.NestedBool(u.Object, "status", "identityStatus", "idpRegistered")
			return registered, fmt.Sprint(u.Object["status"]), nil
		})
	})

	t.Run("the callee's inbound refuses the user's token: wrong audience", func(t *testing.T) {
		status, body := httpGet(t, "http://"+framework.PortForward(t, ns, callee.Name, int(inbound))+"/tasks", "", user)
		if status != http.StatusUnauthorized {
			t.Fatalf("direct call with the user's token: %d %s; want 401", status, body)
		}
	})

	t.Run("a transparent-mode workload in a restricted namespace gets the admission warning", func(t *testing.T) {
		other := framework.Namespace(t, c, "kind-restricted", map[string]string{
			"kagenti.io/injection":               "enabled",
			"pod-security.kubernetes.io/enforce": "restricted",
		})
		want := fmt.Sprintf(`kagenti-injector: namespace %q enforces Pod Security "restricted:latest"`, other)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: other, Labels: map[string]string{"kagenti.io/inject": "enabled"}},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
					Spec: corev1.PodSpec{
						SecurityContext: restrictedPod(),
						Containers:      []corev1.Container{{Name: "agent", Image: framework.AgentImage(), SecurityContext: restrictedContainer()}},
					},
				},
			},
		}
		// The injector learns a namespace's level from its watch of Namespaces: a dry run until it
		// has seen the new one, then the real create.
		framework.Eventually(t, 30*time.Second, "the injector's warning on a dry-run create", func(ctx context.Context) (bool, string, error) {
			warnings.reset()
			if err := warned.Create(ctx, d.DeepCopy(), client.DryRunAll); err != nil {
				return false, "", err
			}
			return warnings.contains(want), strings.Join(warnings.all(), " | "), nil
		})
		warnings.reset()
		framework.Create(t, warned, d)
		if !warnings.contains(want) || !warnings.contains(`container "proxy-init"`) {
			t.Fatalf("warnings %q; want one that starts %q and names proxy-init", warnings.all(), want)
		}
	})
}

// namedPort is the container port of the pod named name.
func namedPort(t *testing.T, p *corev1.Pod, name string) int32 {
	t.Helper()
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, port := range ctr.Ports {
			if port.Name == name {
				return port.ContainerPort
			}
		}
	}
	t.Fatalf("pod %s has no container port named %s", p.Name, name)
	return 0
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// warningRecorder keeps the warnings the API server returns (admission warnings among them), as
// kubectl would print them.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

func (w *warningRecorder) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = nil
}

func (w *warningRecorder) contains(s string) bool {
	for _, m := range w.all() {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// clientWithWarnings is a client whose warnings are recorded.
func clientWithWarnings(t *testing.T) (client.Client, *warningRecorder) {
	t.Helper()
	w := &warningRecorder{}
	cfg := rest.CopyConfig(framework.Config(t))
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}
