package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
	"github.com/kagenti/platform/e2e/framework/agent"
	"github.com/kagenti/platform/e2e/framework/podrunner"
)

// TestIdentityFlow: two agents, caller and callee, labelled for injection, each with a
// TokenExchange; their pods run on a kwok node of their own whose pod IPs are routable from this
// machine, and the test kubelet (podrunner) starts each pod's injected containers from bin/ as
// the pod spec says. SPIRE, spiffe-helper, kagenti-authbridge, kagenti-dev-idp, the injector and
// the tokenexchange controller are the real programs; the agents are stand-ins. docs/identity.md
// ("The flow on the local cluster") says what is real and what is simulated.
func TestIdentityFlow(t *testing.T) {
	f := newIdentityFlow(t)
	user := f.idp.token(t, "user", "user-secret")

	t.Run("the test kubelet runs each container as its spec says", func(t *testing.T) {
		for _, p := range []*podrunner.RunningPod{f.caller, f.callee} {
			for _, c := range p.Pod.Spec.InitContainers {
				if c.RestartPolicy != nil { // the native sidecars; proxy-init has exited
					checkContainerProcess(t, p, c)
				}
			}
		}
	})

	t.Run("the agent's own probes pass through the authbridge: Ready, never restarted", func(t *testing.T) {
		for _, p := range []*podrunner.RunningPod{f.caller, f.callee} {
			agent := p.Pod.Spec.Containers[0]
			for kind, probe := range map[string]*corev1.Probe{"readyz": agent.ReadinessProbe, "livez": agent.LivenessProbe} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/app-health/agent/"+kind || probe.HTTPGet.Port.IntValue() != sidecarStatusPort {
					t.Fatalf("pod %s: the agent's %s probe %+v; want the injector's rewrite to the authbridge status port", p.Pod.Name, kind, probe)
				}
			}
			// Through the pod IP as the kubelet: the inbound proxy would answer 401 to the original.
			p.WaitReady(t, time.Minute, 500*time.Millisecond)
		}
		// A liveness probe failing three times in a row fails the test when it ends (podrunner).
	})

	t.Run("spiffe-helper wrote the caller's JWT SVID from SPIRE", func(t *testing.T) {
		claims := jwtClaims(t, f.callerSVID(t))
		if claims["sub"] != f.callerID || fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{f.idp.issuer}) {
			t.Fatalf("JWT SVID claims %v: want sub %s, aud [%s]", claims, f.callerID, f.idp.issuer)
		}
	})

	t.Run("the callee's client-registration registered it with the OIDC provider (RFC 7591)", func(t *testing.T) {
		f.waitReady(f.callee, registerStatusPort)
		dir := filepath.Join(f.dir, "pods", f.ns+"_"+f.callee.Pod.Name, "volumes", "kagenti-shared")
		for _, name := range []string{"client-id.txt", "client-secret.txt"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || strings.TrimSpace(string(b)) == "" {
				t.Fatalf("%s on the callee's shared volume: %q, %v", name, b, err)
			}
		}
		id, _ := os.ReadFile(filepath.Join(dir, "client-id.txt"))
		if !strings.HasPrefix(string(id), "dyn-") {
			t.Errorf("client ID %q was not issued by the dev IdP's registration endpoint", id)
		}
		framework.Eventually(t, time.Minute, "callee-auth status: registered and Ready", func(ctx context.Context) (bool, string, error) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(tokenExchangeGVK)
			if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "callee-auth"}, u); err != nil {
				return false, "", err
			}
			registered, _, _ := unstructured.NestedBool(u.Object, "status", "identityStatus", "idpRegistered")
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			return registered && phase == "Active", fmt.Sprintf("idpRegistered %v, phase %q, status %v", registered, phase, u.Object["status"]), nil
		})
	})

	t.Run("the caller's call leaves through its outbound proxy, exchanged for the callee", func(t *testing.T) {
		got := f.callCallee(t, user)
		exchanged := bearer(got.Headers)
		if exchanged == user {
			t.Fatal("the callee received the caller's original token: no exchange")
		}
		claims := jwtClaims(t, exchanged)
		if fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{f.calleeID}) {
			t.Errorf("exchanged token audience %v, want [%s]", claims["aud"], f.calleeID)
		}
		if act, _ := claims["act"].(map[string]any); act["sub"] != f.callerID {
			t.Errorf("exchanged token act %v: want the caller %s (authenticated by its JWT SVID)", claims["act"], f.callerID)
		}
		if want := strings.Split(exchanged, ".")[1]; got.Headers.Get("X-Kagenti-Claims") != want {
			t.Errorf("X-Kagenti-Claims %q, want the validated payload %q", got.Headers.Get("X-Kagenti-Claims"), want)
		}
	})

	t.Run("the callee's inbound refuses the original token: wrong audience", func(t *testing.T) {
		status, body := httpGet(t, "http://"+f.calleeInbound()+"/tasks", f.calleeHost(), user)
		if status != http.StatusUnauthorized || !strings.Contains(body, "does not include") {
			t.Fatalf("direct call with the caller's token: %d %s; want 401 naming the audience", status, body)
		}
	})

	t.Run("a pass-through route leaves the token alone", func(t *testing.T) {
		res := f.agentCall(t, user, "http://"+f.echoAddr+"/passthrough", forgedHost)
		got := decodeReport(t, res)
		if got.Pod != "host-echo" || bearer(got.Headers) != user {
			t.Fatalf("pass-through: %+v; want the host echo server with the original token", got)
		}
	})

	t.Run("a Host naming the pass-through or the IdP does not carry the token elsewhere", func(t *testing.T) {
		idp, err := url.Parse(f.idp.issuer)
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{forgedHost, f.echoAddr, idp.Host} {
			res := f.agentCall(t, user, "http://"+f.calleeInbound()+"/tasks", host)
			if res.Status != http.StatusOK {
				t.Fatalf("Host %s to the callee: %d %s; want the call exchanged as its destination says (the callee refuses the user's own token)", host, res.Status, res.Body)
			}
			if got := decodeReport(t, res); bearer(got.Headers) == user {
				t.Fatalf("Host %s to the callee: the callee received the caller's original token", host)
			}
		}
	})

	t.Run("a changed audience takes effect without a restart", func(t *testing.T) {
		pids := f.pids(t)
		v2 := f.calleeID + "-v2"
		secs := f.updateTokenExchange(t, "caller-auth", func(u *unstructured.Unstructured) {
			mustSet(t, u, f.callerRules(v2), "spec", "outbound", "tokenExchange", "destinationRules")
		})
		t.Logf("caller TokenExchange: pods on the new content hash %.1f s after the update (load %s)", secs, loadAverage())
		res := f.agentCall(t, user, "http://"+f.calleeInbound()+"/tasks", f.calleeHost())
		if res.Status != http.StatusUnauthorized || !strings.Contains(res.Body, v2) {
			t.Fatalf("with the new audience the callee (still expecting the old one) answered %d %s; want 401 naming %s", res.Status, res.Body, v2)
		}
		secs = f.updateTokenExchange(t, "callee-auth", func(u *unstructured.Unstructured) {
			mustSet(t, u, v2, "spec", "inbound", "validation", "audience")
		})
		t.Logf("callee TokenExchange: pods on the new content hash %.1f s after the update (load %s)", secs, loadAverage())
		got := f.callCallee(t, user)
		if aud := jwtClaims(t, bearer(got.Headers))["aud"]; fmt.Sprint(aud) != fmt.Sprint([]any{v2}) {
			t.Errorf("exchanged token audience %v, want [%s]", aud, v2)
		}
		if after := f.pids(t); fmt.Sprint(after) != fmt.Sprint(pids) {
			t.Errorf("processes restarted: before %v, after %v", pids, after)
		}
	})
}

// Names and addresses of the flow.
const (
	identityNode       = "kagenti-identity-e2e"
	identityTaint      = "kagenti.io/identity-e2e"
	identityPodCIDR    = "10.78.0.0/25"   // kwok hands out .1 … .126
	identityHostAddr   = "10.78.0.254/24" // the bridge's address, outside what kwok hands out
	identityPodHosts   = "10.78.0.*"      // a destination rule's host for the node's pods
	agentImage         = "example.com/e2e/identity-agent:test"
	agentPort          = 8081
	inboundPort        = 8080
	registerStatusPort = 15124
	inboundStatusPort  = 15125
	outboundStatusPort = 15126
	sidecarStatusPort  = 15128
)

type identityFlow struct {
	t                  *testing.T
	c                  client.Client
	ns, dir            string
	hostIP             string
	idp                *devIdP
	callerID, calleeID string
	echoAddr           string
	caller, callee     *podrunner.RunningPod
}

func newIdentityFlow(t *testing.T) *identityFlow {
	bin := requireIdentityPrograms(t)
	c := framework.Client(t)
	if !localPillarRunning(t, "injector") || !localPillarRunning(t, "tokenexchange") {
		t.Skip("the identity flow needs kagenti-injector and kagenti-tokenexchange running on the local cluster (make build)")
	}
	dir, err := os.MkdirTemp("/tmp", "kgif-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	f := &identityFlow{t: t, c: c, dir: dir}
	createIdentityNode(t, c)
	bridge := podrunner.NewBridge(t, netip.MustParsePrefix(identityHostAddr))
	f.hostIP = bridge.HostAddr.Addr().String()
	spire := startSPIRE(t, bin, dir)

	f.ns = framework.Namespace(t, c, "idflow", map[string]string{"kagenti.io/injection": "enabled"})
	f.callerID = "spiffe://cluster.local/ns/" + f.ns + "/sa/caller"
	f.calleeID = "spiffe://cluster.local/ns/" + f.ns + "/sa/callee"
	f.idp = startDevIdP(t, bin, dir, f.hostIP, spire.bundle, "user:user-secret:"+f.callerID)
	f.echoAddr = serveOn(t, f.hostIP, agent.ReportHandler("host-echo"))

	callerPod := f.createAgent("caller", map[string]string{"kagenti.io/spiffe": "enabled"})
	calleePod := f.createAgent("callee", nil)
	f.createTokenExchanges() // after their targets: the controller writes a ConfigMap for a resolved target
	spire.register(t, f.callerID, spiffeHelperUID(t, callerPod))

	kubelet := podrunner.NewKubelet(t, &podrunner.Kubelet{
		Client: c, Bridge: bridge, Dir: filepath.Join(dir, "pods"),
		Programs: map[string]string{
			"kagenti-authbridge": filepath.Join(bin, "kagenti-authbridge"),
			"spiffe-helper":      filepath.Join(bin, "spiffe-helper"),
		},
		AgentArgv:           []string{os.Args[0], "-test.run=^$"},
		AgentEnv:            []string{"KAGENTI_PODRUNNER_CHILD=" + agentChild},
		SpireAgentSocketDir: spire.socketDir,
	})
	f.callee = kubelet.Run(t, calleePod)
	f.caller = kubelet.Run(t, callerPod)
	f.waitReady(f.callee, inboundStatusPort)
	f.waitReady(f.caller, outboundStatusPort)
	f.waitAgent(f.callee)
	f.waitAgent(f.caller)
	return f
}

// requireIdentityPrograms skips unless this is the local cluster, the test runs as root and the
// real programs are built; it returns bin/.
func requireIdentityPrograms(t *testing.T) string {
	if framework.ClusterKind() != "local" {
		t.Skip("the identity flow runs the pods' containers as local processes: local cluster only")
	}
	if os.Geteuid() != 0 {
		t.Skip("the identity flow needs root: network and mount namespaces, nftables, processes under the pods' UIDs")
	}
	bin := filepath.Join(framework.Root(), "bin")
	for _, p := range []string{"kagenti-authbridge", "spire-server", "spire-agent", "spiffe-helper", "kagenti-dev-idp"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			t.Skipf("bin/%s is missing: make tools build", p)
		}
	}
	return bin
}

// createIdentityNode adds a kwok node whose pods get IPs this machine routes to (the local
// cluster's node hands out loopback IPs, which other tests rely on). Its taint keeps every other
// pod off it.
func createIdentityNode(t *testing.T, c client.Client) {
	ctx := context.Background()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: identityNode,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"kubernetes.io/hostname": identityNode, "type": "kwok"}},
		Spec: corev1.NodeSpec{PodCIDR: identityPodCIDR, PodCIDRs: []string{identityPodCIDR},
			Taints: []corev1.Taint{{Key: identityTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{"cpu": resource.MustParse("32"), "memory": resource.MustParse("128Gi"), "pods": resource.MustParse("110")},
			Capacity:    corev1.ResourceList{"cpu": resource.MustParse("32"), "memory": resource.MustParse("128Gi"), "pods": resource.MustParse("110")},
		},
	}
	deleteNode := func() {
		_ = c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: identityNode}})
		framework.Eventually(t, 60*time.Second, "node "+identityNode+" deleted", func(ctx context.Context) (bool, string, error) {
			err := c.Get(ctx, client.ObjectKey{Name: identityNode}, &corev1.Node{})
			return apierrors.IsNotFound(err), "still there", client.IgnoreNotFound(err)
		})
	}
	deleteNode() // left over by an interrupted run
	framework.Create(t, c, node)
	t.Cleanup(deleteNode)
	framework.Eventually(t, 60*time.Second, "node "+identityNode+" Ready (kwok)", func(ctx context.Context) (bool, string, error) {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: identityNode}, &n); err != nil {
			return false, "", err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, string(cond.Status), nil
			}
		}
		return false, "no Ready condition", nil
	})
}

// createTokenExchanges points both workloads at the dev IdP. The caller does not register: it
// authenticates its exchanges with its JWT SVID, whose audience (spiffe.audience) is the IdP. The
// callee registers with the dev IdP as provider oidc (RFC 7591) and validates.
func (f *identityFlow) createTokenExchanges() {
	validation := map[string]any{"issuer": f.idp.issuer, "jwksUrl": f.idp.issuer + "/keys"}
	f.createTokenExchange("caller-auth", map[string]any{
		"targetRef":          map[string]any{"kind": "Deployment", "name": "caller"},
		"spiffe":             map[string]any{"audience": f.idp.issuer},
		"clientRegistration": map[string]any{"enabled": false},
		"inbound":            map[string]any{"validation": validation},
		"outbound": map[string]any{"tokenExchange": map[string]any{
			"tokenUrl": f.idp.issuer + "/oauth/token", "destinationRules": f.callerRules(f.calleeID)}},
	})
	f.createTokenExchange("callee-auth", map[string]any{
		"targetRef": map[string]any{"kind": "Deployment", "name": "callee"},
		"clientRegistration": map[string]any{"provider": "oidc", "oidc": map[string]any{
			"issuer": f.idp.issuer, "tokenUrl": f.idp.issuer + "/oauth/token",
			"jwksUrl": f.idp.issuer + "/keys", "registrationUrl": f.idp.issuer + "/register"}},
		"inbound":  map[string]any{"validation": validation},
		"outbound": map[string]any{"tokenExchange": map[string]any{"enabled": false}},
	})
}

// callerRules: the host echo server (on the bridge's address) is left alone; the identity node's
// pods on the inbound port, the callee among them, get a token for audience. The rules name
// addresses: the outbound proxy chooses a route by a Host name only when that name resolves to the
// connection's destination, and the pods use the host's resolver, where callee.<ns>.svc means
// nothing (in a cluster it resolves to the Service's ClusterIP, the destination of such calls).
func (f *identityFlow) callerRules(audience string) []any {
	return []any{
		map[string]any{"match": map[string]any{"host": f.hostIP}},
		map[string]any{"match": map[string]any{"host": identityPodHosts + ":" + strconv.Itoa(inboundPort)},
			"target": map[string]any{"audience": audience, "scopes": []any{"agent:invoke"}}},
	}
}

// calleeHost is the Host of the caller's requests to the callee, as if through a Service.
func (f *identityFlow) calleeHost() string { return "callee." + f.ns + ".svc" }

// forgedHost names the pass-through destination on requests that go elsewhere.
const forgedHost = "passthrough.example"

func (f *identityFlow) createTokenExchange(name string, spec map[string]any) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(tokenExchangeGVK)
	u.SetNamespace(f.ns)
	u.SetName(name)
	framework.Create(f.t, f.c, u)
	workload := spec["targetRef"].(map[string]any)["name"].(string)
	framework.Eventually(f.t, 60*time.Second, "ConfigMap "+workload+"-token-exchange", func(ctx context.Context) (bool, string, error) {
		err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: workload + "-token-exchange"}, &corev1.ConfigMap{})
		return err == nil, fmt.Sprint(err), client.IgnoreNotFound(err)
	})
}

// createAgent creates the workload's ServiceAccount and Deployment (pinned to the identity node)
// and returns its pod once kwok runs it.
func (f *identityFlow) createAgent(name string, labels map[string]string) *corev1.Pod {
	t := f.t
	framework.Create(t, f.c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}})
	l := map[string]string{"app": name, "kagenti.io/inject": "enabled"}
	for k, v := range labels {
		l[k] = v
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					ServiceAccountName:           name,
					AutomountServiceAccountToken: ptr.To(false), // the agents do not call the API
					NodeSelector:                 map[string]string{"kubernetes.io/hostname": identityNode},
					Tolerations:                  []corev1.Toleration{{Key: identityTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name: "agent", Image: agentImage,
						Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: agentPort}},
						// The agent's own probes on its own port, which the inbound interception
						// catches: the injector rewrites them to the authbridge (issue 27).
						ReadinessProbe: agentProbe("/ready"),
						LivenessProbe:  agentProbe("/live"),
						Env: []corev1.EnvVar{
							{Name: "AGENT_LISTEN", Value: "127.0.0.1:" + strconv.Itoa(agentPort)},
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						},
					}},
				},
			},
		},
	}
	framework.Create(t, f.c, d)
	if _, ok := d.Spec.Template.Annotations["kagenti.io/injection-status"]; !ok {
		t.Fatalf("Deployment %s was not injected", name)
	}
	pods := framework.PodsOf(t, f.c, f.ns, map[string]string{"app": name}, 1)
	return &pods[0]
}

// agentProbe is an HTTP probe of the agent's port, every 2 s (3 failures: the kubelet would restart it).
func agentProbe(path string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("a2a")}},
		PeriodSeconds: 2}
}

// spiffeHelperUID is the user the injected spiffe-helper runs as: SPIRE's unix attestor selects
// the caller's identity by it.
func spiffeHelperUID(t *testing.T, pod *corev1.Pod) int64 {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == "spiffe-helper" && c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			return *c.SecurityContext.RunAsUser
		}
	}
	t.Fatalf("pod %s has no spiffe-helper with runAsUser", pod.Name)
	return 0
}

// calleeInbound is the callee's inbound port (8080) on its pod IP, where the test and the caller's
// agent call it. 8080 is also the seed's Keycloak port that the injector used to exclude from
// interception: the caller's call must still be redirected to its outbound proxy and exchanged.
func (f *identityFlow) calleeInbound() string {
	return net.JoinHostPort(f.callee.Pod.Status.PodIP, strconv.Itoa(inboundPort))
}

// agentCall asks the caller's agent, through the caller's inbound proxy (the user's token has the
// caller's audience), to call url with Host host; the agent passes the token on.
func (f *identityFlow) agentCall(t *testing.T, token, target, host string) agent.CallResult {
	t.Helper()
	u := fmt.Sprintf("http://%s/call?%s", net.JoinHostPort(f.caller.Pod.Status.PodIP, strconv.Itoa(inboundPort)),
		url.Values{"url": {target}, "host": {host}}.Encode())
	status, body := httpGet(t, u, "", token)
	if status != http.StatusOK {
		t.Fatalf("calling the caller's agent: %d %s", status, body)
	}
	var res agent.CallResult
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatalf("the caller's agent answered %q: %v", body, err)
	}
	return res
}

// callCallee makes the caller's agent call the callee and returns what the callee's agent received.
func (f *identityFlow) callCallee(t *testing.T, token string) agent.Report {
	t.Helper()
	res := f.agentCall(t, token, "http://"+f.calleeInbound()+"/tasks", f.calleeHost())
	if res.Status != http.StatusOK {
		t.Fatalf("caller → callee: %d %s", res.Status, res.Body)
	}
	got := decodeReport(t, res)
	if got.Pod != f.callee.Pod.Name {
		t.Fatalf("answered by %q, want the callee's agent %s", got.Pod, f.callee.Pod.Name)
	}
	return got
}

func decodeReport(t *testing.T, res agent.CallResult) agent.Report {
	t.Helper()
	var r agent.Report
	if res.Status != http.StatusOK || json.Unmarshal([]byte(res.Body), &r) != nil {
		t.Fatalf("want an agent report, got %d %s", res.Status, res.Body)
	}
	return r
}

// callerSVID reads the JWT SVID from the caller's kagenti-shared volume.
func (f *identityFlow) callerSVID(t *testing.T) string {
	p := filepath.Join(f.dir, "pods", f.ns+"_"+f.caller.Pod.Name, "volumes", "kagenti-shared", "jwt_svid.token")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading the caller's JWT SVID: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// waitReady waits for a role's /readyz on the pod IP, the way the tokenexchange controller reaches it.
func (f *identityFlow) waitReady(p *podrunner.RunningPod, port int) {
	u := fmt.Sprintf("http://%s/readyz", net.JoinHostPort(p.Pod.Status.PodIP, strconv.Itoa(port)))
	framework.Eventually(f.t, 2*time.Minute, p.Pod.Name+" ready at "+u, func(ctx context.Context) (bool, string, error) {
		status, body := httpGet(f.t, u, "", "")
		return status == http.StatusOK, fmt.Sprintf("%d %s", status, body), nil
	})
}

// checkContainerProcess compares a container's process with its spec: user and group, no_new_privs,
// and each mount (and the root) read-only or not, as the kernel reports them.
func checkContainerProcess(t *testing.T, p *podrunner.RunningPod, c corev1.Container) {
	t.Helper()
	pid := strconv.Itoa(p.PID(t, c.Name))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	want := map[string]string{
		"Uid":        fmt.Sprintf("%d", ptr.Deref(sc.RunAsUser, 0)),
		"Gid":        fmt.Sprintf("%d", ptr.Deref(sc.RunAsGroup, 0)),
		"NoNewPrivs": map[bool]string{true: "1", false: "0"}[sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation],
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, value, _ := strings.Cut(line, ":")
		if w, ok := want[key]; ok && strings.Fields(value)[0] != w {
			t.Errorf("%s/%s: %s %s, want %s", p.Pod.Name, c.Name, key, strings.Fields(value)[0], w)
		}
	}
	readOnly := mountReadOnly(t, pid)
	if got, want := readOnly["/"], ptr.Deref(sc.ReadOnlyRootFilesystem, false); got != want {
		t.Errorf("%s/%s: / read-only %v, want %v", p.Pod.Name, c.Name, got, want)
	}
	for _, m := range c.VolumeMounts {
		got, ok := readOnly[m.MountPath]
		if !ok || got != m.ReadOnly {
			t.Errorf("%s/%s: %s mounted %v, read-only %v; want read-only %v", p.Pod.Name, c.Name, m.MountPath, ok, got, m.ReadOnly)
		}
	}
}

// mountReadOnly maps the mount points a process sees to whether they are read-only (the topmost
// mount of a path counts).
func mountReadOnly(t *testing.T, pid string) map[string]bool {
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fields := strings.Fields(line) // id parent major:minor root mountpoint options …
		if len(fields) > 5 {
			out[fields[4]] = slices.Contains(strings.Split(fields[5], ","), "ro")
		}
	}
	return out
}

// waitAgent waits until the pod's agent answers behind its inbound proxy (/healthz needs no
// token): the kubelet starts it last, and nothing probes it.
func (f *identityFlow) waitAgent(p *podrunner.RunningPod) {
	u := fmt.Sprintf("http://%s/healthz", net.JoinHostPort(p.Pod.Status.PodIP, strconv.Itoa(inboundPort)))
	framework.Eventually(f.t, 2*time.Minute, p.Pod.Name+"'s agent answering at "+u, func(ctx context.Context) (bool, string, error) {
		status, body := httpGet(f.t, u, "", "")
		return status == http.StatusOK, fmt.Sprintf("%d %s", status, body), nil
	})
}

// pids are the process IDs of both pods' running containers.
func (f *identityFlow) pids(t *testing.T) map[string]int {
	out := map[string]int{}
	for _, p := range []*podrunner.RunningPod{f.caller, f.callee} {
		for _, c := range p.Containers() {
			out[p.Pod.Name+"/"+c] = p.PID(t, c)
		}
	}
	return out
}

// updateTokenExchange changes a TokenExchange and waits until its status reports every pod on the
// new content (configuredPods, ConfigPropagated); it returns the seconds that took.
func (f *identityFlow) updateTokenExchange(t *testing.T, name string, change func(*unstructured.Unstructured)) float64 {
	t.Helper()
	key := client.ObjectKey{Namespace: f.ns, Name: name}
	var generation int64
	var before string
	start := time.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(tokenExchangeGVK)
		if err := f.c.Get(context.Background(), key, u); err != nil {
			return err
		}
		before, _, _ = unstructured.NestedString(u.Object, "status", "contentHash")
		change(u)
		start = time.Now()
		if err := f.c.Update(context.Background(), u); err != nil {
			return err
		}
		generation = u.GetGeneration()
		return nil
	})
	if err != nil {
		t.Fatalf("updating TokenExchange %s: %v", name, err)
	}
	framework.Eventually(t, 3*time.Minute, "TokenExchange "+name+" reports its pod on the new content", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(tokenExchangeGVK)
		if err := f.c.Get(ctx, key, u); err != nil {
			return false, "", err
		}
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		hash, _, _ := unstructured.NestedString(u.Object, "status", "contentHash")
		configured, _, _ := unstructured.NestedInt64(u.Object, "status", "configuredPods")
		propagated := conditionStatus(u, "ConfigPropagated")
		msg := fmt.Sprintf("observedGeneration %d/%d contentHash %s (was %s) configuredPods %d ConfigPropagated %s",
			observed, generation, hash, before, configured, propagated)
		return observed >= generation && hash != before && configured == 1 && propagated == "True", msg, nil
	})
	return time.Since(start).Seconds()
}

func conditionStatus(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

func mustSet(t *testing.T, u *unstructured.Unstructured, value any, fields ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, value, fields...); err != nil {
		t.Fatalf("setting %s: %v", strings.Join(fields, "."), err)
	}
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// HTTP and token helpers.

func httpGet(t *testing.T, u, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func bearer(h http.Header) string { return strings.TrimPrefix(h.Get("Authorization"), "Bearer ") }

func jwtClaims(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", jwt)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// serveOn serves h on a free port of ip until the test ends and returns the address.
func serveOn(t *testing.T, ip string, h http.Handler) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// Host processes: SPIRE and the dev IdP.

// startHostProcess runs a program on the host until the test ends (SIGTERM, then SIGKILL; it dies
// with the test too), its output in dir/<name>.log, shown when the test failed.
func startHostProcess(t *testing.T, dir, name string, argv ...string) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- %s log:\n%s", name, b)
		}
	})
}

func freeLoopbackPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type spireServer struct {
	bin, serverSocket string
	// socketDir holds the agent's Workload API socket (agent.sock): a csi.spiffe.io volume.
	socketDir string
	bundle    string
}

const spireNodeID = "spiffe://cluster.local/identity-e2e-node"

// startSPIRE starts a SPIRE server and an agent attested with a join token (unix workload
// attestor), both on loopback.
func startSPIRE(t *testing.T, bin, dir string) *spireServer {
	s := &spireServer{bin: bin, serverSocket: filepath.Join(dir, "spire-server", "api.sock"), socketDir: filepath.Join(dir, "agent-sockets")}
	for _, d := range []string{filepath.Dir(s.serverSocket), s.socketDir, filepath.Join(dir, "spire-agent")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := freeLoopbackPort(t)
	serverConf := filepath.Join(dir, "spire-server", "server.conf")
	writeFile(t, serverConf, fmt.Sprintf(`server {
  bind_address = "127.0.0.1"
  bind_port = "%d"
  socket_path = %q
  trust_domain = "cluster.local"
  data_dir = %q
  log_level = "WARN"
  default_jwt_svid_ttl = "5m"
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = %q
    }
  }
  KeyManager "memory" {
    plugin_data {}
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
}
`, port, s.serverSocket, filepath.Join(dir, "spire-server", "data"), filepath.Join(dir, "spire-server", "datastore.sqlite3")))
	startHostProcess(t, dir, "spire-server", filepath.Join(bin, "spire-server"), "run", "-config", serverConf)
	framework.Eventually(t, 2*time.Minute, "SPIRE server healthy", func(context.Context) (bool, string, error) {
		out, err := s.cli("healthcheck")
		return err == nil, out, nil
	})
	out, err := s.cli("token", "generate", "-spiffeID", spireNodeID)
	if err != nil {
		t.Fatalf("spire-server token generate: %v: %s", err, out)
	}
	token := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "Token:"))
	bundle, err := s.cli("bundle", "show", "-format", "spiffe")
	if err != nil {
		t.Fatalf("spire-server bundle show: %v: %s", err, bundle)
	}
	s.bundle = filepath.Join(dir, "bundle.json")
	writeFile(t, s.bundle, bundle)

	agentConf := filepath.Join(dir, "spire-agent", "agent.conf")
	writeFile(t, agentConf, fmt.Sprintf(`agent {
  data_dir = %q
  log_level = "WARN"
  server_address = "127.0.0.1"
  server_port = "%d"
  socket_path = %q
  trust_domain = "cluster.local"
  insecure_bootstrap = true
}
plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, filepath.Join(dir, "spire-agent", "data"), port, filepath.Join(s.socketDir, "agent.sock")))
	startHostProcess(t, dir, "spire-agent", filepath.Join(bin, "spire-agent"), "run", "-config", agentConf, "-joinToken", token)
	framework.Eventually(t, 2*time.Minute, "SPIRE agent healthy", func(context.Context) (bool, string, error) {
		out, err := exec.Command(filepath.Join(bin, "spire-agent"), "healthcheck", "-socketPath", filepath.Join(s.socketDir, "agent.sock")).CombinedOutput()
		return err == nil, string(out), nil
	})
	return s
}

func (s *spireServer) cli(args ...string) (string, error) {
	args = append(args, "-socketPath", s.serverSocket)
	out, err := exec.Command(filepath.Join(s.bin, "spire-server"), args...).CombinedOutput()
	return string(out), err
}

// register gives processes of uid on the agent's node the SPIFFE ID id.
func (s *spireServer) register(t *testing.T, id string, uid int64) {
	out, err := s.cli("entry", "create", "-parentID", spireNodeID, "-spiffeID", id, "-selector", fmt.Sprintf("unix:uid:%d", uid))
	if err != nil {
		t.Fatalf("spire-server entry create: %v: %s", err, out)
	}
}

type devIdP struct{ issuer string }

// startDevIdP starts kagenti-dev-idp on the bridge address, where pods and this test reach it,
// accepting the SPIRE bundle's JWT SVIDs as client assertions.
func startDevIdP(t *testing.T, bin, dir, hostIP, bundle string, clients ...string) *devIdP {
	addr := net.JoinHostPort(hostIP, strconv.Itoa(freeLoopbackPort(t)))
	args := []string{filepath.Join(bin, "kagenti-dev-idp"), "--addr", addr, "--spiffe-bundle", bundle, "--spiffe-trust-domain", "cluster.local"}
	for _, c := range clients {
		args = append(args, "--client", c)
	}
	startHostProcess(t, dir, "kagenti-dev-idp", args...)
	idp := &devIdP{issuer: "http://" + addr}
	framework.Eventually(t, time.Minute, "dev IdP serving", func(context.Context) (bool, string, error) {
		status, body := httpGet(t, idp.issuer+"/.well-known/openid-configuration", "", "")
		return status == http.StatusOK, body, nil
	})
	return idp
}

// token is a client-credentials token of the client.
func (idp *devIdP) token(t *testing.T, id, secret string) string {
	return clientCredentialsToken(t, idp.issuer, id, secret)
}

// clientCredentialsToken asks the dev IdP at base for a client-credentials token of the client.
func clientCredentialsToken(t *testing.T, base, id, secret string) string {
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"agent:invoke"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || tr.AccessToken == "" {
		t.Fatalf("client credentials token for %s: %d %v", id, resp.StatusCode, err)
	}
	return tr.AccessToken
}

func writeFile(t *testing.T, path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
